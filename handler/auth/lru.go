package auth

import "container/list"

// lru is a map of at most max entries that drops the least recently used
// one to make room. Not safe for concurrent use.
type lru[K comparable, V any] struct {
	max int
	ll  *list.List // front: most recently used
	m   map[K]*list.Element
}

type entry[K comparable, V any] struct {
	key K
	val V
}

func newLRU[K comparable, V any](max int) *lru[K, V] {
	return &lru[K, V]{max: max, ll: list.New(), m: map[K]*list.Element{}}
}

// get returns key's value and marks it used.
func (l *lru[K, V]) get(key K) (V, bool) {
	if e, ok := l.m[key]; ok {
		l.ll.MoveToFront(e)
		return e.Value.(*entry[K, V]).val, true
	}
	var zero V
	return zero, false
}

// put sets key's value, marks it used, and drops the least recently used
// entry when there are more than max.
func (l *lru[K, V]) put(key K, val V) {
	if e, ok := l.m[key]; ok {
		e.Value.(*entry[K, V]).val = val
		l.ll.MoveToFront(e)
		return
	}
	l.m[key] = l.ll.PushFront(&entry[K, V]{key, val})
	if l.ll.Len() > l.max {
		last := l.ll.Back()
		l.ll.Remove(last)
		delete(l.m, last.Value.(*entry[K, V]).key)
	}
}

func (l *lru[K, V]) remove(key K) {
	if e, ok := l.m[key]; ok {
		l.ll.Remove(e)
		delete(l.m, key)
	}
}

func (l *lru[K, V]) len() int { return l.ll.Len() }

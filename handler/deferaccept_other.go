//go:build !linux

package handler

// deferAccept does nothing where TCP_DEFER_ACCEPT does not exist: silent
// connections then take slots until evicted (see Listen).
func deferAccept(uintptr, int) error { return nil }

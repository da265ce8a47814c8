package history

import (
	"math/rand/v2"
	"slices"
	"time"
)

// serviceBlock is how many of a history's steps each round of the
// many-Services steps spreads over: web2 joins in its first third, a
// later claim of be (web3) is refused in its second, web2 leaves in its last.
const serviceBlock = 30

// joinedFor is the least web2 stays joined before it leaves: its servers
// are in service and, with the Data Plane driver, written to haproxy.cfg
// by then, so what the leave does to them is the service's alone.
const joinedFor = 4 * time.Second

// withServices inserts the many-Services steps into a history, drawn from
// a stream of their own, so the pod steps are those of the seed without
// them, each with its own wait. A duplicate's window holds no step of the
// history's own: web's pod steps and reloads are kept out of it (see
// Duplicate's doc in world_services.go for why), except one NotReady of a
// live pod, undone by a Ready right after the window: a change web, the
// holder, must still reach be with (out-of-traffic judges it), so that a
// claim that froze or took the holder's backend shows. web2 may join inside
// the window: one Service's refusal holds no other's step back.
func withServices(seed uint64, shape Shape, steps []Step) []Step {
	r := rand.New(rand.NewPCG(seed^0x5e41ce5, seed))
	pods := map[int]podState{}
	for n := 1; n <= shape.Start; n++ {
		pods[n] = live
	}
	var out []Step
	var now, joinedAt time.Duration
	joined := false
	var join, dup, leave int
	var joinInside bool
	for i, st := range steps {
		if i%serviceBlock == 0 {
			n := min(serviceBlock, len(steps)-i)
			third := max(n/3, 1)
			join, dup, leave = i+r.IntN(third), i+third+r.IntN(third), i+2*third+r.IntN(max(n-2*third, 1))
			joinInside = r.IntN(2) == 0
		}
		if i == join && !joinInside && !joined {
			out = append(out, Step{Kind: ServiceJoin})
			joined, joinedAt = true, now
		}
		if i == dup {
			window := 2500*time.Millisecond + time.Duration(r.Int64N(int64(1500*time.Millisecond)))
			out = append(out, Step{Kind: Duplicate})
			used := time.Duration(0)
			var flapped []int
			if c := inState(pods, live); len(c) > 0 {
				p := c[r.IntN(len(c))]
				wait := time.Duration(r.Int64N(int64(window / 3)))
				out = append(out, Step{Wait: wait, Kind: NotReady, Pods: []int{p}})
				used += wait
				flapped = []int{p}
			}
			if joinInside && !joined {
				wait := time.Duration(r.Int64N(int64(window / 3)))
				out = append(out, Step{Wait: wait, Kind: ServiceJoin})
				used += wait
				joined, joinedAt = true, now+used
			}
			out = append(out, Step{Wait: window - used, Kind: DuplicateEnd})
			now += window
			if len(flapped) > 0 {
				out = append(out, Step{Kind: Ready, Pods: flapped})
			}
		}
		if i == leave && joined {
			wait := max(0, joinedFor-(now-joinedAt))
			out = append(out, Step{Wait: wait, Kind: ServiceLeave})
			now += wait
			joined = false
		}
		now += st.Wait
		out = append(out, st)
		follow(pods, st)
	}
	return out
}

// inState lists the pods in state s, by number.
func inState(pods map[int]podState, s podState) []int {
	var out []int
	for n, st := range pods {
		if st == s {
			out = append(out, n)
		}
	}
	slices.Sort(out) // map order is random: the draw must be the seed's alone
	return out
}

// follow moves pods as step st does, as Generate tracks them.
func follow(pods map[int]podState, st Step) {
	switch st.Kind {
	case Recreate:
		delete(pods, st.Pods[0])
		pods[st.Pods[1]] = live
		return
	case Rollout:
		half := len(st.Pods) / 2
		for _, p := range st.Pods[:half] {
			pods[p] = terminating
		}
		for _, p := range st.Pods[half:] {
			pods[p] = live
		}
		return
	}
	for _, p := range st.Pods {
		switch st.Kind {
		case Add, Revive, Ready:
			pods[p] = live
		case AddDead:
			pods[p] = unreachable
		case Terminate:
			pods[p] = terminating
		case Gone:
			delete(pods, p)
		case Kill:
			pods[p] = dead
		case Notice:
			pods[p] = noticed
		case NotReady:
			pods[p] = notReady
		}
	}
}

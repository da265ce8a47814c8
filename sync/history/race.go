//go:build race

package history

// raceEnabled: these tests run with -race; serve histories build the
// binary with it too.
const raceEnabled = true

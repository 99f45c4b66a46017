//go:build race

package loop

// raceEnabled reports whether the race detector is on: it roughly doubles a process's memory,
// which the memory figures of the tests must allow for.
const raceEnabled = true

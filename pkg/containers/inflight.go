package containers

import "sync"

// uploadCount counts the uploads in progress per identity, at most max of one identity at
// once: the Containers API's files, the Skills API's bundles and Anthropic's uploads each bound
// theirs with one.
type uploadCount struct {
	mu  sync.Mutex
	n   map[string]int
	max int
}

func newUploadCount(max int) uploadCount { return uploadCount{n: map[string]int{}, max: max} }

// beginUpload reports whether identity may start one more upload, and counts it if so.
func (u *uploadCount) beginUpload(identity string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.n[identity] >= u.max {
		return false
	}
	u.n[identity]++
	return true
}

// endUpload ends an upload beginUpload counted.
func (u *uploadCount) endUpload(identity string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.n[identity]--; u.n[identity] <= 0 {
		delete(u.n, identity)
	}
}

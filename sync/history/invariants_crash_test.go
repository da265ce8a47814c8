package history

import "testing"

// TestWorkerCrashes: a former worker's exit by a signal counts, a plain
// exit (its connections done), nor one asked to end (SIGTERM, SIGKILL),
// nor another process's.
func TestWorkerCrashes(t *testing.T) {
	log := `[NOTICE]   (100) : haproxy version is 2.6.12
[WARNING]  (100) : Former worker (201) exited with code 0 (Exit)
[WARNING]  (100) : Former worker (202) exited with code 139 (Segmentation fault)
[ALERT]    (100) : Current worker (203) exited with code 134 (Aborted)
[WARNING]  (100) : Former worker (204) exited with code 134 (Aborted)
[WARNING]  (100) : Former worker (205) exited with code 1 (Exit)
[WARNING]  (100) : Former worker (206) exited with code 143 (Terminated)
[WARNING]  (100) : Former worker (207) exited with code 137 (Killed)
`
	if n := workerCrashes(log); n != 2 {
		t.Errorf("workerCrashes = %d, want 2 (202 and 204)", n)
	}
	if n := workerCrashes(""); n != 0 {
		t.Errorf("no log: %d", n)
	}
}

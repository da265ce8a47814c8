package kube

import (
	"fmt"
	"io/fs"
	"syscall"
)

// statIdentity is a file's inode, device and change time: a write or a
// replacement changes them, whatever its modification time says.
func statIdentity(fi fs.FileInfo) string {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return ""
	}
	return fmt.Sprintf("%d/%d/%d", st.Dev, st.Ino, st.Ctim.Nano())
}

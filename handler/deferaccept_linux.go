package handler

import "syscall"

// deferAccept makes the kernel hand a connection to Accept only once its
// first bytes arrived (or after seconds): a client that connects and says
// nothing, or is slow to write, never holds one of MaxConns slots meanwhile.
func deferAccept(fd uintptr, seconds int) error {
	return syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_DEFER_ACCEPT, seconds)
}

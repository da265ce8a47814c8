package history

import (
	"fmt"
	"net"
	"strconv"
	"syscall"
	"time"
)

// A pod that dies as a node does under load, or behind a network that drops
// rather than refuses: its address neither refuses nor answers a
// connection, and HAProxy's check and clients wait for their timeouts
// (Setup.BlackHoles). It is a socket that listens with the smallest
// backlog and never accepts, its queue filled: the kernel then drops
// every SYN.
type blackHole struct {
	fd      int
	fillers []net.Conn
}

// openBlackHole holds addr (host:port) as a black hole.
func openBlackHole(addr string) (*blackHole, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	p, err := strconv.Atoi(port)
	ip := net.ParseIP(host).To4()
	if err != nil || ip == nil {
		return nil, fmt.Errorf("black hole at %s: not an IPv4 address and port", addr)
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	sa := &syscall.SockaddrInet4{Port: p}
	copy(sa.Addr[:], ip)
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err == nil {
		err = syscall.Bind(fd, sa)
	}
	if err == nil {
		err = syscall.Listen(fd, 0)
	}
	if err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("black hole at %s: %w", addr, err)
	}
	h := &blackHole{fd: fd}
	// Fill the accept queue: once a connection waits in it and another's
	// SYN goes unanswered, every later one does too.
	for range 4 {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			return h, nil
		}
		h.fillers = append(h.fillers, c)
	}
	h.close()
	return nil, fmt.Errorf("black hole at %s: its queue never filled", addr)
}

func (h *blackHole) close() {
	for _, c := range h.fillers {
		c.Close()
	}
	syscall.Close(h.fd)
}

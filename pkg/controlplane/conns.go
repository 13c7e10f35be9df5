package controlplane

import (
	"net"
	"sync"
	"time"
)

// keepAlivePeriod is the TCP keep-alive period of accepted connections, as
// the apiserver's own listener wrapper sets it.
const keepAlivePeriod = 3 * time.Minute

// trackingListener is the apiserver's listener. It remembers every
// connection it accepted until that connection is closed, so that a
// shutdown can end the ones the apiserver does not end itself: long-running
// requests other than watches (kubectl logs -f, exec, attach, port-forward,
// proxies) keep the HTTP server's graceful shutdown waiting for the request
// timeout, a minute.
type trackingListener struct {
	net.Listener
	// mu guards conns.
	mu sync.Mutex
	// conns holds the connections accepted and not yet closed.
	conns map[*trackedConn]struct{}
}

// trackConnections wraps l.
func trackConnections(l net.Listener) *trackingListener {
	return &trackingListener{Listener: l, conns: make(map[*trackedConn]struct{})}
}

// Accept accepts a connection, turns TCP keep-alive on and remembers it.
func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetKeepAlive(true)
		tc.SetKeepAlivePeriod(keepAlivePeriod)
	}
	t := &trackedConn{Conn: c, owner: l}
	l.mu.Lock()
	l.conns[t] = struct{}{}
	l.mu.Unlock()
	return t, nil
}

// open returns how many accepted connections are still open.
func (l *trackingListener) open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
}

// closeAll closes every connection still open and returns how many there
// were. Requests on them fail at their next read or write.
func (l *trackingListener) closeAll() int {
	l.mu.Lock()
	conns := make([]*trackedConn, 0, len(l.conns))
	for c := range l.conns {
		conns = append(conns, c)
	}
	l.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
	return len(conns)
}

// trackedConn is a connection accepted by a trackingListener; closing it
// removes it from the listener's set.
type trackedConn struct {
	net.Conn
	// owner is the listener that accepted the connection.
	owner *trackingListener
	// once makes Close forget the connection once.
	once sync.Once
}

// Close closes the connection and forgets it.
func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.owner.mu.Lock()
		delete(c.owner.conns, c)
		c.owner.mu.Unlock()
	})
	return c.Conn.Close()
}

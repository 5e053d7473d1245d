package server

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"strings"
)

// DefaultListen is where potato serve listens when not told: loopback only.
const DefaultListen = "127.0.0.1:7878"

// Listen opens addr: "unix:/path" for a unix socket (an old socket file left by a dead server is
// replaced; the socket is made private to its owner), else host:port for TCP ("127.0.0.1:0" picks a
// free port). It is an error when the socket path is empty, when a live server already answers on it,
// and when the system refuses the address (in use, not local, not permitted).
func Listen(addr string) (net.Listener, error) {
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		if path == "" {
			return nil, errors.New("server: listen unix: no socket path")
		}
		if fi, err := os.Lstat(path); err == nil && fi.Mode()&fs.ModeSocket != 0 {
			if c, err := net.Dial("unix", path); err == nil {
				c.Close()
				return nil, fmt.Errorf("server: listen %s: a server already answers there", addr)
			}
			os.Remove(path) // a dead server's socket
		}
		l, err := net.Listen("unix", path)
		if err != nil {
			return nil, fmt.Errorf("server: listen: %w", err)
		}
		if err := os.Chmod(path, 0o600); err != nil {
			l.Close()
			return nil, fmt.Errorf("server: listen: %w", err)
		}
		return l, nil
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("server: listen: %w", err)
	}
	return l, nil
}

// CheckExposure refuses an address reachable from other machines without a bearer token: an error that
// names the address and says to give --token-file or listen on loopback or a unix socket; nil otherwise.
func CheckExposure(a net.Addr, token string) error {
	if !LocalAddr(a) && token == "" {
		return fmt.Errorf("server: %s is reachable from other machines: give a bearer token (--token-file) or listen on loopback or a unix socket", a)
	}
	return nil
}

// CheckListen checks a --listen address and the token before anything opens or listens, so that a
// refusal comes before "listening on": the address must parse, and one that is not loopback (or a unix
// socket) needs a token. A host name is resolved; 0.0.0.0, :: and an empty host are every interface.
func CheckListen(addr, token string) error {
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		if path == "" {
			return errors.New("server: listen unix: no socket path")
		}
		return nil
	}
	ta, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		return fmt.Errorf("server: --listen %q: %w", addr, err)
	}
	if ta.IP == nil {
		ta.IP = net.IPv4zero // ":7878" listens on every interface
	}
	return CheckExposure(ta, token)
}

// LocalAddr reports whether a is a unix socket or a loopback TCP address: reachable from this machine
// only, so that no token is required.
func LocalAddr(a net.Addr) bool {
	switch a := a.(type) {
	case *net.UnixAddr:
		return true
	case *net.TCPAddr:
		return a.IP.IsLoopback()
	}
	return false
}

// AddrString is a as a client dials it: "unix:/path" or "http://host:port".
func AddrString(a net.Addr) string {
	if u, ok := a.(*net.UnixAddr); ok {
		return "unix:" + u.Name
	}
	return "http://" + a.String()
}

// authorized reports whether r carries the bearer token. Both sides are hashed first so that the
// constant-time comparison does not leak the token's length either.
func authorized(r *http.Request, token string) bool {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return false
	}
	g, w := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(token))
	return subtle.ConstantTimeCompare(g[:], w[:]) == 1
}

// ReadToken reads a bearer token from path (- for stdin): the content without surrounding white space. A
// token shorter than 16 characters is refused (it could be guessed).
func ReadToken(path string) (string, error) {
	var data []byte
	var err error
	if path == "-" { // stdin: a secret store can pipe it in without a file
		data, err = io.ReadAll(io.LimitReader(os.Stdin, 1<<16))
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return "", fmt.Errorf("server: token file: %w", err)
	}
	tok := strings.TrimSpace(string(data))
	if len(tok) < 16 {
		return "", fmt.Errorf("server: token file %s: the token has %d characters, want at least 16", path, len(tok))
	}
	if strings.ContainsAny(tok, " \t\r\n") {
		return "", fmt.Errorf("server: token file %s: the token contains white space", path)
	}
	return tok, nil
}

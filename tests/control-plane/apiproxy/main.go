// apiproxy is a loopback TCP proxy in front of the API server, for
// scripts/control-plane.sh: the simulated node talks to the API server
// through it, so a test can cut the node off (an outage) without stopping
// the API server, whose port the kernel releases slowly and which the
// controllers and kwok need meanwhile (docs/control-plane.md#the-proxy).
//
//	apiproxy --listen 127.0.0.1:P --target 127.0.0.1:API --control 127.0.0.1:C [--max-conns N]
//
// It forwards bytes and knows nothing of TLS: the client still verifies
// the API server's certificate (which names 127.0.0.1) end to end.
//
// The control endpoint is plain HTTP on loopback:
//
//	POST /down   close every proxied connection at once; accept and at once
//	             close every new one until /up (the port stays held)
//	POST /up     forward again
//	GET  /status {"state":"up"|"down","live":N,...}
//
// Every answer is the status. Live connections are capped (--max-conns):
// past the cap a new connection is closed at once and counted as refused.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

type proxy struct {
	target string
	max    int

	mu       sync.Mutex
	down     bool
	live     map[*pair]struct{}
	dialling int // connections accepted whose dial to the target is under way
	accepted uint64
	refused  uint64
	downs    uint64
}

// pair is one proxied connection: the client's side and the API server's.
type pair struct {
	client, server net.Conn
	once           sync.Once
}

func (p *pair) close() {
	p.once.Do(func() {
		p.client.Close()
		p.server.Close()
	})
}

type status struct {
	State    string `json:"state"`
	Live     int    `json:"live"`
	Max      int    `json:"max"`
	Accepted uint64 `json:"accepted"`
	Refused  uint64 `json:"refused"`
	Downs    uint64 `json:"downs"`
	Target   string `json:"target"`
}

func (p *proxy) status() status {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := status{State: "up", Live: len(p.live), Max: p.max, Accepted: p.accepted,
		Refused: p.refused, Downs: p.downs, Target: p.target}
	if p.down {
		s.State = "down"
	}
	return s
}

// setDown moves to down (closing every live connection) or back up.
func (p *proxy) setDown(down bool) {
	p.mu.Lock()
	was := p.down
	p.down = down
	var closing []*pair
	if down {
		for c := range p.live {
			closing = append(closing, c)
		}
		p.live = map[*pair]struct{}{}
		if !was {
			p.downs++
		}
	}
	p.mu.Unlock()
	for _, c := range closing {
		c.close()
	}
	switch {
	case down && !was:
		log.Printf("down: closed %d live connections; refusing new ones", len(closing))
	case !down && was:
		log.Printf("up: forwarding to %s again", p.target)
	}
}

// refuse closes a connection at once: the proxy is down or full.
func (p *proxy) refuse(c net.Conn, why string) {
	p.mu.Lock()
	p.refused++
	n := p.refused
	p.mu.Unlock()
	c.Close()
	// Say it for the first few and then every 100th, so a client that
	// retries in a tight loop cannot fill the log.
	if n <= 5 || n%100 == 0 {
		log.Printf("refused a connection from %s: %s (%d refused so far)", c.RemoteAddr(), why, n)
	}
}

func (p *proxy) handle(c net.Conn) {
	// The cap counts connections being dialled too, so a flood of new
	// connections cannot make more than max dials at once.
	p.mu.Lock()
	down, full := p.down, len(p.live)+p.dialling >= p.max
	if !down && !full {
		p.dialling++
	}
	p.mu.Unlock()
	if down {
		p.refuse(c, "down")
		return
	}
	if full {
		p.refuse(c, fmt.Sprintf("%d live connections, the cap", p.max))
		return
	}
	s, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	p.mu.Lock()
	p.dialling--
	if err == nil && !p.down {
		pr := &pair{client: c, server: s}
		p.live[pr] = struct{}{}
		p.accepted++
		p.mu.Unlock()
		p.pipe(pr)
		return
	}
	p.mu.Unlock()
	if err != nil {
		p.refuse(c, "dial "+p.target+": "+err.Error())
		return
	}
	// A /down came while dialling: it must close this one too.
	s.Close()
	p.refuse(c, "down")
}

// pipe copies both ways until either side ends, then closes both and
// forgets the pair.
func (p *proxy) pipe(pr *pair) {
	c, s := pr.client, pr.server
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		io.Copy(dst, src)
		done <- struct{}{}
	}
	go pipe(s, c)
	go pipe(c, s)
	// Either side ending ends both: TLS and HTTP clients do not half-close.
	<-done
	pr.close()
	<-done
	p.mu.Lock()
	delete(p.live, pr)
	p.mu.Unlock()
}

func (p *proxy) control() http.Handler {
	mux := http.NewServeMux()
	reply := func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(p.status())
	}
	mux.HandleFunc("/down", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "POST /down", http.StatusMethodNotAllowed)
			return
		}
		p.setDown(true)
		reply(w)
	})
	mux.HandleFunc("/up", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "POST /up", http.StatusMethodNotAllowed)
			return
		}
		p.setDown(false)
		reply(w)
	})
	mux.HandleFunc("/status", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			http.Error(w, "GET /status", http.StatusMethodNotAllowed)
			return
		}
		reply(w)
	})
	return mux
}

// loopback refuses an address that is not on 127.0.0.0/8: the proxy and
// its unauthenticated control endpoint must never face a network.
func loopback(flagName, addr string) {
	host, _, err := net.SplitHostPort(addr)
	ip := net.ParseIP(host)
	if err != nil || ip == nil || !ip.IsLoopback() {
		fmt.Fprintf(os.Stderr, "apiproxy: --%s %q is not a loopback IP:port\n", flagName, addr)
		os.Exit(2)
	}
}

func main() {
	listen := flag.String("listen", "", "loopback address to accept on (IP:port)")
	target := flag.String("target", "", "the API server's address (IP:port)")
	ctl := flag.String("control", "", "loopback address of the control endpoint (IP:port)")
	max := flag.Int("max-conns", 256, "cap on live proxied connections")
	flag.Parse()
	if *listen == "" || *target == "" || *ctl == "" || *max < 1 || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: apiproxy --listen IP:PORT --target IP:PORT --control IP:PORT [--max-conns N]")
		os.Exit(2)
	}
	loopback("listen", *listen)
	loopback("control", *ctl)
	loopback("target", *target)
	log.SetPrefix("apiproxy: ")
	log.SetFlags(log.LstdFlags | log.Lmicroseconds | log.LUTC)

	p := &proxy{target: *target, max: *max, live: map[*pair]struct{}{}}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	cl, err := net.Listen("tcp", *ctl)
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Handler: p.control(), ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second, MaxHeaderBytes: 16 << 10}
	go func() {
		if err := srv.Serve(cl); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Fatal(err)
		}
	}()
	go func() {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
		s := <-sig
		log.Printf("%v: closing", s)
		ln.Close()
		p.setDown(true)
		os.Exit(0)
	}()
	log.Printf("forwarding %s to %s (control http://%s, at most %d live connections)", *listen, *target, *ctl, *max)
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// EMFILE and the like pass: back off instead of spinning or dying.
			log.Printf("accept: %v", err)
			time.Sleep(50 * time.Millisecond)
			continue
		}
		go p.handle(c)
	}
}

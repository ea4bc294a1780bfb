package harness

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"
)

// Remote is a [Cluster] run by a child process: the same etcd, apiserver
// and proxy, started by the same code, but outside the caller's process, so
// that the caller's CPU time, heap and goroutines are its clients' alone.
// Benchmarks use it: in process, the apiserver's work (it costs many times
// what a client does) and its 2,500 goroutines and watch cache would be
// measured with the client's.
//
// The child is the caller's own executable, run again: the program (a test
// binary's TestMain) must call [ServeRemote] before anything else. Create
// one with [StartRemote]. Its methods are safe for concurrent use; each
// command waits for the one before it.
type Remote struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	// replies carries the child's answers, one line each; it is closed
	// when the child closes its end (it exited).
	replies <-chan string
	addr    string

	mu     sync.Mutex
	closed bool
	exited chan struct{}
}

// Environment variables that make a process a Remote's child.
const (
	remoteEnv        = "WATCHGRADE_HARNESS_REMOTE"
	remoteOptionsEnv = "WATCHGRADE_HARNESS_REMOTE_OPTIONS"
)

// remoteStartTimeout bounds how long a child may take to report its
// cluster ready (etcd and apiserver start in 2 to 3 s on a quiet machine).
const remoteStartTimeout = 3 * time.Minute

// StartRemote starts a child process running a Cluster with opts and
// returns once its apiserver is ready. The child writes its logs (etcd's,
// the apiserver's) to log. It stops when tb's cleanups run, or at Close.
func StartRemote(tb TB, opts Options, log io.Writer) *Remote {
	tb.Helper()
	return startRemote(tb, "1", opts, log)
}

// startRemote starts a child with remoteEnv set to mode.
func startRemote(tb TB, mode string, opts Options, log io.Writer) *Remote {
	tb.Helper()
	self, err := os.Executable()
	if err != nil {
		tb.Fatalf("remote: %v", err)
	}
	encoded, err := json.Marshal(opts)
	if err != nil {
		tb.Fatalf("remote: %v", err)
	}
	replyR, replyW, err := os.Pipe()
	if err != nil {
		tb.Fatalf("remote: %v", err)
	}
	cmd := exec.Command(self, "-test.run=^$", "-test.bench=^$")
	cmd.Env = append(os.Environ(), remoteEnv+"="+mode, remoteOptionsEnv+"="+string(encoded))
	cmd.Stdout, cmd.Stderr = log, log
	cmd.ExtraFiles = []*os.File{replyW} // fd 3 in the child
	in, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatalf("remote: %v", err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("remote: start %s: %v", self, err)
	}
	_ = replyW.Close()
	replies := make(chan string)
	r := &Remote{cmd: cmd, in: in, replies: replies, exited: make(chan struct{})}
	go func() {
		defer close(replies)
		lines := bufio.NewScanner(replyR)
		for lines.Scan() {
			replies <- lines.Text()
		}
	}()
	go func() {
		_ = cmd.Wait()
		close(r.exited)
	}()
	tb.Cleanup(r.Close)
	line, err := r.readReply(remoteStartTimeout)
	if err != nil {
		tb.Fatalf("remote: the child did not start its cluster: %v", err)
	}
	addr, ok := strings.CutPrefix(line, "ready ")
	if !ok {
		tb.Fatalf("remote: the child said %q, want ready", line)
	}
	r.addr = addr
	return r
}

// Config returns an admin client config that reaches the child's apiserver
// through its proxy, as [Cluster.Config] does; it keeps working across
// apiserver restarts. Each call returns a new copy.
func (r *Remote) Config() *rest.Config {
	return &rest.Config{
		Host:            "https://" + r.addr,
		BearerToken:     adminToken,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true},
		QPS:             1000,
		Burst:           2000,
	}
}

// Compact compacts the child's etcd at its current revision
// ([Cluster.Compact]) and returns the revision.
func (r *Remote) Compact() (int64, error) {
	line, err := r.command("compact")
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(line, 10, 64)
}

// RestartAPIServer restarts the child's apiserver as
// [Cluster.RestartAPIServer] does: a second apiserver on the same etcd, the
// proxy switched to it with every connection to the first cut, the first
// shut down. It returns once the first is shut down.
func (r *Remote) RestartAPIServer() error {
	_, err := r.command("restart")
	return err
}

// Close stops the child (its cluster's cleanups run) and waits for it to
// exit. Safe to call more than once.
func (r *Remote) Close() {
	r.mu.Lock()
	if !r.closed {
		r.closed = true
		_ = r.in.Close()
	}
	r.mu.Unlock()
	select {
	case <-r.exited:
	case <-time.After(time.Minute):
		_ = r.cmd.Process.Kill()
		<-r.exited
	}
}

// command sends one command and returns the child's answer after "ok ".
func (r *Remote) command(cmd string) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return "", errors.New("remote: closed")
	}
	if _, err := fmt.Fprintln(r.in, cmd); err != nil {
		return "", fmt.Errorf("remote: %s: %w", cmd, err)
	}
	line, err := r.readReply(remoteStartTimeout)
	if err != nil {
		return "", fmt.Errorf("remote: %s: %w", cmd, err)
	}
	if rest, ok := strings.CutPrefix(line, "ok"); ok {
		return strings.TrimSpace(rest), nil
	}
	return "", fmt.Errorf("remote: %s: %s", cmd, line)
}

func (r *Remote) readReply(timeout time.Duration) (string, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case line, ok := <-r.replies:
		if !ok {
			return "", errors.New("the child exited; see its log")
		}
		return line, nil
	case <-t.C:
		return "", fmt.Errorf("no answer within %v", timeout)
	}
}

// ServeRemote makes this process a Remote's child when [StartRemote]
// started it, and otherwise returns at once. As a child it starts a Cluster
// with the options it was given, answers commands until its parent closes
// its input, stops the cluster, and exits; it never returns. Call it first
// in TestMain.
func ServeRemote() {
	switch os.Getenv(remoteEnv) {
	case "":
		return
	case remoteModeEtcd:
		serveRemoteEtcd(os.NewFile(3, "reply"))
	}
	var opts Options
	if err := json.Unmarshal([]byte(os.Getenv(remoteOptionsEnv)), &opts); err != nil {
		fmt.Fprintf(os.Stderr, "remote: options: %v\n", err)
		os.Exit(2)
	}
	reply := os.NewFile(3, "reply")
	ok := NewProgram("watchgrade-remote", os.Stderr).Run(func(tb TB) {
		c := Start(tb, opts)
		fmt.Fprintf(reply, "ready %s\n", c.Proxy.Addr())
		var sampler *peakSampler
		in := bufio.NewScanner(os.Stdin)
		for in.Scan() {
			switch cmd := in.Text(); cmd {
			case "compact":
				rev, err := c.Compact(context.Background())
				if err != nil {
					fmt.Fprintf(reply, "error %v\n", err)
					continue
				}
				fmt.Fprintf(reply, "ok %d\n", rev)
			case "restart":
				c.RestartAPIServer()
				fmt.Fprintln(reply, "ok")
			case "spare":
				addr, err := c.StartSpare()
				if err != nil {
					fmt.Fprintf(reply, "error %v\n", err)
					continue
				}
				fmt.Fprintf(reply, "ok %s\n", addr)
			case "switch":
				if err := c.SwitchToSpare(); err != nil {
					fmt.Fprintf(reply, "error %v\n", err)
					continue
				}
				fmt.Fprintln(reply, "ok")
			case "retire":
				c.RetireOld()
				fmt.Fprintln(reply, "ok")
			case "reset":
				c.Proxy.ResetAll()
				fmt.Fprintln(reply, "ok")
			case "peaks-start", "peaks-stop":
				fmt.Fprintln(reply, peakCommand(cmd, &sampler))
			default:
				fmt.Fprintf(reply, "error unknown command %q\n", cmd)
			}
		}
	})
	if !ok {
		os.Exit(1)
	}
	os.Exit(0)
}

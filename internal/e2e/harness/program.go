package harness

import (
	"fmt"
	"io"
	"os"
	"sync"

	"k8s.io/kubernetes/test/utils/ktesting"
)

// TB is what the harness needs from its caller: *testing.T and
// *testing.B have it, and so does [Program] for a main program.
type TB = ktesting.TB

// Program lets a main program (a demo, say) start a Cluster: it implements
// TB by logging to a writer, running cleanups on Close, and turning a fatal
// error into a panic that Run recovers. It is safe for concurrent use.
type Program struct {
	name string
	out  io.Writer

	mu       sync.Mutex
	cleanups []func()
	failed   bool
}

// programFatal is the panic value of Program.FailNow.
type programFatal struct{}

// NewProgram returns a Program named name that logs to out.
func NewProgram(name string, out io.Writer) *Program { return &Program{name: name, out: out} }

// Run calls f, then runs every cleanup in reverse order, and reports
// whether f failed (through Fatal, Error or Fail).
func (p *Program) Run(f func(TB)) (ok bool) {
	defer func() {
		if r := recover(); r != nil {
			if _, fatal := r.(programFatal); !fatal {
				p.Close()
				panic(r)
			}
		}
		p.Close()
		ok = !p.Failed()
	}()
	f(p)
	return true
}

// Close runs the cleanups registered so far, newest first.
func (p *Program) Close() {
	p.mu.Lock()
	cleanups := p.cleanups
	p.cleanups = nil
	p.mu.Unlock()
	for i := len(cleanups) - 1; i >= 0; i-- {
		cleanups[i]()
	}
}

// The methods below implement TB for a program: Log and Logf write to the
// Program's writer, Error and Fail mark it failed, Fatal, FailNow and the
// Skip family also stop the function given to Run, and Attr does nothing.

func (p *Program) Attr(key, value string) {}
func (p *Program) Chdir(dir string) {
	if err := os.Chdir(dir); err != nil {
		p.Fatal(err)
	}
}
func (p *Program) Cleanup(f func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cleanups = append(p.cleanups, f)
}
func (p *Program) Error(args ...any) { p.Log(args...); p.Fail() }
func (p *Program) Errorf(format string, args ...any) {
	p.Logf(format, args...)
	p.Fail()
}
func (p *Program) Fail() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failed = true
}
func (p *Program) FailNow()          { p.Fail(); panic(programFatal{}) }
func (p *Program) Failed() bool      { p.mu.Lock(); defer p.mu.Unlock(); return p.failed }
func (p *Program) Fatal(args ...any) { p.Log(args...); p.FailNow() }
func (p *Program) Fatalf(format string, args ...any) {
	p.Logf(format, args...)
	p.FailNow()
}
func (p *Program) Helper()         {}
func (p *Program) Log(args ...any) { fmt.Fprintln(p.out, args...) }
func (p *Program) Logf(format string, args ...any) {
	fmt.Fprintf(p.out, format+"\n", args...)
}
func (p *Program) Name() string { return p.name }
func (p *Program) Setenv(key, value string) {
	if err := os.Setenv(key, value); err != nil {
		p.Fatal(err)
	}
}
func (p *Program) Skip(args ...any)                 { p.Fatal(args...) }
func (p *Program) Skipf(format string, args ...any) { p.Fatalf(format, args...) }
func (p *Program) SkipNow()                         { p.FailNow() }
func (p *Program) Skipped() bool                    { return false }

// TempDir returns a new directory removed by Close.
func (p *Program) TempDir() string {
	dir, err := os.MkdirTemp("", p.name+"-")
	if err != nil {
		p.Fatal(err)
	}
	p.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

var _ TB = (*Program)(nil)

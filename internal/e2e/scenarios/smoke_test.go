package scenarios

import (
	"bytes"
	"net"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/watchgrade/watchgrade/internal/e2e/harness"
)

func TestHarnessStarts(t *testing.T) {
	c := harness.Start(t, harness.Options{})
	client := kubernetes.NewForConfigOrDie(c.Config())
	if _, err := client.CoreV1().Namespaces().Get(t.Context(), "default", metav1.GetOptions{}); err != nil {
		t.Fatalf("get namespace default through the proxy: %v", err)
	}
}

// A main program (the demo) starts a cluster through harness.Program, with
// no *testing.T, and everything stops at the end of Run.
func TestHarnessFromAProgram(t *testing.T) {
	var log bytes.Buffer
	var addr string
	ok := harness.NewProgram("e2e-program", &log).Run(func(tb harness.TB) {
		c := harness.Start(tb, harness.Options{})
		addr = c.Proxy.Addr()
		client := kubernetes.NewForConfigOrDie(c.Config())
		if _, err := client.CoreV1().Namespaces().Get(t.Context(), "default", metav1.GetOptions{}); err != nil {
			tb.Fatalf("get namespace default: %v", err)
		}
	})
	if !ok {
		t.Fatalf("Program.Run failed:\n%s", log.String())
	}
	if conn, err := net.Dial("tcp", addr); err == nil {
		conn.Close()
		t.Errorf("proxy %s still accepts connections after Run returned, want it closed", addr)
	}
}

package scenarios

import (
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

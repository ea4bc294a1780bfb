package watchtest_test

import (
	"os"
	"testing"

	"github.com/watchgrade/watchgrade/watch/watchtest"
)

func TestMain(m *testing.M) {
	// Informers run inside synctest bubbles here.
	watchtest.DisableHandleErrorBackoff()
	os.Exit(m.Run())
}

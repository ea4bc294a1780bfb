package watch

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/utils/ptr"
)

// checkResult is the answer to a check of the cursor (see cursorAhead).
type checkResult struct {
	ahead error
	told  bool
}

// confirmed records that the server delivered from the stream's cursor.
func (s *Stream) confirmed() {
	s.unconfirmed, s.doubt = time.Time{}, false
}

// ErrCursorAhead: the server has not reached the stream's cursor (see "A
// server behind the cursor" in the package doc). It ends a session with
// [ClassExpired] and [ReasonResourceVersionTooLarge]; the stream replays.
var ErrCursorAhead = errors.New("the server has not reached the stream's cursor")

// cursorCheckTimeout is the timeoutSeconds of a check of the cursor.
const cursorCheckTimeout = 10 * time.Second

// cursorAhead asks the server whether it has reached cursor: an error
// wrapping ErrCursorAhead if not, nil if it has, told false if it could
// not tell.
func (s *Stream) cursorAhead(ctx context.Context, cursor string) (ahead error, told bool) {
	if _, err := resourceversion.CompareResourceVersion(cursor, cursor); err == nil {
		// timeoutSeconds also marks the LIST as a check, not a replay's
		// first page.
		list, err := s.lw.inner.ListWithContext(ctx, metav1.ListOptions{Limit: 1, TimeoutSeconds: ptr.To(int64(cursorCheckTimeout / time.Second))})
		if err != nil {
			return nil, false
		}
		m, err := meta.ListAccessor(list)
		if err != nil {
			return nil, false
		}
		current := m.GetResourceVersion()
		if c, err := resourceversion.CompareResourceVersion(current, cursor); err == nil {
			if c >= 0 {
				return nil, true
			}
			return fmt.Errorf("%w (resourceVersion %s, the server's is %s)", ErrCursorAhead, cursor, current), true
		}
	}
	_, err := s.lw.inner.ListWithContext(ctx, metav1.ListOptions{
		ResourceVersion: cursor, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, Limit: 1,
		TimeoutSeconds: ptr.To(int64(cursorCheckTimeout / time.Second)),
	})
	switch {
	case err == nil:
		return nil, true
	case !apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge):
		return nil, false
	}
	return fmt.Errorf("%w (resourceVersion %s): %w", ErrCursorAhead, cursor, err), true
}

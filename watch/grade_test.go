package watch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/watchgrade/watchgrade/watch/watchtest"
)

var ignoreMessage = cmpopts.IgnoreFields(State{}, "Message")

// TestGrade holds the rows of Grade's doc comment, in its order.
func TestGrade(t *testing.T) {
	expiredEvent := apierrorsFromObject(watchtest.ErrorEvent(watchtest.Expired()).Object)
	blocked := func(r Reason, human bool) State { return State{Phase: PhaseBlocked, Reason: r, NeedsHuman: human} }
	replaying := State{Phase: PhaseReplaying, Reason: ReasonExpiredResourceVersion}
	tooLarge := apierrors.NewTimeoutError("Too large resource version", 1)
	tooLarge.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: metav1.CauseTypeResourceVersionTooLarge}}

	tests := []struct {
		name string
		in   Ending
		want Verdict
	}{
		// owner's context done, whatever else
		{"teardown wins over a clean close", Ending{OwnerDone: true, Stage: StageStream, Cause: CauseClosed, Duration: time.Hour},
			Verdict{Outcome: OutcomeTeardown, Class: ClassNone, Next: NextStop, Wait: WaitNone}},
		{"teardown wins over an error", Ending{OwnerDone: true, Stage: StageStream, Cause: CauseError, Err: watchtest.Forbidden(), Failures: 9, Trouble: time.Hour},
			Verdict{Outcome: OutcomeTeardown, Class: ClassNone, Next: NextStop, Wait: WaitNone}},
		// 410 in every shape
		{"410 Expired as an ERROR event", Ending{Stage: StageStream, Cause: CauseError, Err: expiredEvent, Duration: time.Minute},
			Verdict{Outcome: OutcomeExpired, Class: ClassExpired, Publish: true, PublishAfter: DefaultReplayGrace, State: replaying, Next: NextReplay, Wait: WaitNone}},
		{"410 Expired from the open", Ending{Stage: StageOpen, Cause: CauseError, Err: watchtest.Expired()},
			Verdict{Outcome: OutcomeExpired, Class: ClassExpired, Publish: true, PublishAfter: DefaultReplayGrace, State: replaying, Next: NextReplay, Wait: WaitNone}},
		{"410 Gone from the open", Ending{Stage: StageOpen, Cause: CauseError, Err: watchtest.Gone()},
			Verdict{Outcome: OutcomeExpired, Class: ClassExpired, Publish: true, PublishAfter: DefaultReplayGrace, State: replaying, Next: NextReplay, Wait: WaitNone}},
		{"410 during a replay", Ending{Stage: StageReplay, Cause: CauseError, Err: expiredEvent},
			Verdict{Outcome: OutcomeExpired, Class: ClassExpired, Publish: true, PublishAfter: DefaultReplayGrace, State: replaying, Next: NextReplay, Wait: WaitNone}},
		{"410 from a LIST, repeated, backs off", Ending{Stage: StageList, Cause: CauseError, Err: watchtest.Expired(), Failures: 1, Trouble: time.Second},
			Verdict{Outcome: OutcomeExpired, Class: ClassExpired, Publish: true, PublishAfter: DefaultReplayGrace, State: replaying, Next: NextReplay, Wait: WaitBackoff}},
		{"410 past the progress deadline still replays, at once", Ending{Stage: StageOpen, Cause: CauseError, Err: watchtest.Expired(), Failures: 50, Trouble: time.Hour},
			Verdict{Outcome: OutcomeExpired, Class: ClassExpired, Publish: true, PublishAfter: DefaultReplayGrace, State: replaying, Next: NextReplay, Wait: WaitNone}},
		{"410 during a replay, repeated, backs off", Ending{Stage: StageReplay, Cause: CauseError, Err: watchtest.Expired(), Failures: 2, Trouble: 3 * time.Second},
			Verdict{Outcome: OutcomeExpired, Class: ClassExpired, Publish: true, PublishAfter: DefaultReplayGrace, State: replaying, Next: NextReplay, Wait: WaitBackoff}},
		// clean closes
		{"healthy close after a long session", Ending{Stage: StageStream, Cause: CauseClosed, Duration: 45 * time.Minute},
			Verdict{Outcome: OutcomeClosed, Class: ClassNone, Healthy: true, Next: NextResume, Wait: WaitNone}},
		{"healthy close: short but delivered events", Ending{Stage: StageStream, Cause: CauseClosed, Duration: time.Millisecond, Events: 1, CursorMoved: true},
			Verdict{Outcome: OutcomeClosed, Class: ClassNone, Healthy: true, Next: NextResume, Wait: WaitNone}},
		{"healthy close: short but a bookmark moved the cursor", Ending{Stage: StageStream, Cause: CauseClosed, Duration: time.Millisecond, CursorMoved: true},
			Verdict{Outcome: OutcomeClosed, Class: ClassNone, Healthy: true, Next: NextResume, Wait: WaitNone}},
		{"clean close of a replay, not short", Ending{Stage: StageReplay, Cause: CauseClosed, Duration: 5 * time.Second, Events: 10},
			Verdict{Outcome: OutcomeClosed, Class: ClassNone, Next: NextReplay, Wait: WaitNone}},
		{"short empty close, the first", Ending{Stage: StageStream, Cause: CauseClosed, Duration: 10 * time.Millisecond},
			Verdict{Outcome: OutcomeClosed, Class: ClassNone, ShortClose: true, Next: NextResume, Wait: WaitNone}},
		{"short empty close, the second: try a replay", Ending{Stage: StageStream, Cause: CauseClosed, ShortCloses: 1, Failures: 1},
			Verdict{Outcome: OutcomeClosed, Class: ClassNone, ShortClose: true, Next: NextReplay, Wait: WaitBackoff}},
		{"short empty close after the replay, FlapAfter in a row", Ending{Stage: StageStream, Cause: CauseClosed, ShortCloses: 2, FlapReplayed: true, Failures: 2, Trouble: 2 * time.Second},
			Verdict{Outcome: OutcomeClosed, Class: ClassNone, ShortClose: true, Publish: true, State: blocked(ReasonFlapping, false), Next: NextResume, Wait: WaitBackoff}},
		{"short empty replay, FlapAfter in a row", Ending{Stage: StageReplay, Cause: CauseClosed, ShortCloses: 2, Failures: 2, Trouble: 2 * time.Second},
			Verdict{Outcome: OutcomeClosed, Class: ClassNone, ShortClose: true, Publish: true, State: blocked(ReasonFlapping, false), Next: NextReplay, Wait: WaitBackoff}},
		{"short empty close, replayed, below FlapAfter", Ending{Stage: StageStream, Cause: CauseClosed, ShortCloses: 1, FlapReplayed: true, Failures: 1},
			Verdict{Outcome: OutcomeClosed, Class: ClassNone, ShortClose: true, Next: NextResume, Wait: WaitBackoff}},
		{"short empty replay, the first", Ending{Stage: StageReplay, Cause: CauseClosed},
			Verdict{Outcome: OutcomeClosed, Class: ClassNone, ShortClose: true, Next: NextReplay, Wait: WaitBackoff}},
		// replay deadline
		{"replay deadline passed", Ending{Stage: StageReplay, Cause: CauseReplayDeadline, Duration: 2 * time.Minute, Events: 3},
			Verdict{Outcome: OutcomeError, Class: ClassTransient, Publish: true, State: blocked(ReasonReplayTimedOut, false), Next: NextReplay, Wait: WaitBackoff}},
		// needs a human
		{"403 on a fresh install: within the grace, nothing", Ending{Stage: StageOpen, Cause: CauseError, Err: watchtest.Forbidden(), Failures: 3, Trouble: 14 * time.Second},
			Verdict{Outcome: OutcomeError, Class: ClassNeedsHuman, Next: NextResume, Wait: WaitBackoff}},
		{"403 past the grace", Ending{Stage: StageOpen, Cause: CauseError, Err: watchtest.Forbidden(), Failures: 4, Trouble: 15 * time.Second},
			Verdict{Outcome: OutcomeError, Class: ClassNeedsHuman, Publish: true, State: blocked(ReasonForbidden, true), Next: NextResume, Wait: WaitSlow}},
		{"401 past the grace", Ending{Stage: StageOpen, Cause: CauseError, Err: apierrors.NewUnauthorized("no"), Failures: 4, Trouble: time.Minute},
			Verdict{Outcome: OutcomeError, Class: ClassNeedsHuman, Publish: true, State: blocked(ReasonUnauthorized, true), Next: NextResume, Wait: WaitSlow}},
		{"404 (CRD missing) on a LIST past the grace replays", Ending{Stage: StageList, Cause: CauseError, Err: watchtest.NotFound(), Failures: 4, Trouble: time.Minute},
			Verdict{Outcome: OutcomeError, Class: ClassNeedsHuman, Publish: true, State: blocked(ReasonResourceNotFound, true), Next: NextReplay, Wait: WaitSlow}},
		{"400 bad selector past the grace", Ending{Stage: StageOpen, Cause: CauseError, Err: apierrors.NewBadRequest("bad selector"), Failures: 4, Trouble: time.Minute},
			Verdict{Outcome: OutcomeError, Class: ClassNeedsHuman, Publish: true, State: blocked(ReasonInvalidRequest, true), Next: NextResume, Wait: WaitSlow}},
		{"422 first failure: nothing", Ending{Stage: StageReplay, Cause: CauseError, Err: apierrors.NewInvalid(schema.GroupKind{Kind: "ListOptions"}, "", nil)},
			Verdict{Outcome: OutcomeError, Class: ClassNeedsHuman, Next: NextReplay, Wait: WaitBackoff}},
		// transient
		{"connection refused, first failure: nothing", Ending{Stage: StageOpen, Cause: CauseError, Err: watchtest.ConnectionRefused()},
			Verdict{Outcome: OutcomeError, Class: ClassTransient, Next: NextResume, Wait: WaitBackoff}},
		{"connection refused past the transient grace", Ending{Stage: StageOpen, Cause: CauseError, Err: watchtest.ConnectionRefused(), Failures: 6, Trouble: 31 * time.Second},
			Verdict{Outcome: OutcomeError, Class: ClassTransient, Publish: true, State: blocked(ReasonConnectionFailed, false), Next: NextResume, Wait: WaitBackoff}},
		{"429 honours Retry-After", Ending{Stage: StageOpen, Cause: CauseError, Err: watchtest.TooManyRequests(7)},
			Verdict{Outcome: OutcomeError, Class: ClassTransient, Next: NextResume, Wait: WaitBackoff, RetryAfter: 7 * time.Second}},
		{"504 ResourceVersionTooLarge", Ending{Stage: StageOpen, Cause: CauseError, Err: tooLarge, Failures: 2, Trouble: 40 * time.Second},
			Verdict{Outcome: OutcomeError, Class: ClassTransient, Publish: true, State: blocked(ReasonTimeout, false), Next: NextResume, Wait: WaitBackoff, RetryAfter: time.Second}},
		{"500 decode error as an ERROR event", Ending{Stage: StageStream, Cause: CauseError, Err: apierrors.NewInternalError(errors.New("unable to decode an event from the watch stream")), Duration: time.Minute},
			Verdict{Outcome: OutcomeError, Class: ClassTransient, Next: NextResume, Wait: WaitBackoff}},
		{"EOF during open", Ending{Stage: StageOpen, Cause: CauseError, Err: fmt.Errorf("opening: %w", io.ErrUnexpectedEOF)},
			Verdict{Outcome: OutcomeError, Class: ClassTransient, Next: NextResume, Wait: WaitBackoff}},
		{"bad event", Ending{Stage: StageStream, Cause: CauseBadEvent, Err: ErrNoResourceVersion, Failures: 1, Trouble: 30 * time.Second},
			Verdict{Outcome: OutcomeError, Class: ClassTransient, Publish: true, State: blocked(ReasonBadEvent, false), Next: NextResume, Wait: WaitBackoff}},
		{"handler error, first: nothing", Ending{Stage: StageStream, Cause: CauseHandler, Err: errors.New("db down"), Events: 3},
			Verdict{Outcome: OutcomeError, Class: ClassTransient, Next: NextResume, Wait: WaitBackoff}},
		{"handler error on a snapshot replays", Ending{Stage: StageList, Cause: CauseHandler, Err: errors.New("db down"), Failures: 3, Trouble: 31 * time.Second},
			Verdict{Outcome: OutcomeError, Class: ClassTransient, Publish: true, State: blocked(ReasonHandlerFailed, false), Next: NextReplay, Wait: WaitBackoff}},
		{"handler returning a Forbidden needs a human", Ending{Stage: StageStream, Cause: CauseHandler, Err: fmt.Errorf("update status: %w", watchtest.Forbidden()), Failures: 3, Trouble: 20 * time.Second},
			Verdict{Outcome: OutcomeError, Class: ClassNeedsHuman, Publish: true, State: blocked(ReasonHandlerFailed, true), Next: NextResume, Wait: WaitSlow}},
		// progress deadline
		{"transient past the progress deadline needs a human", Ending{Stage: StageOpen, Cause: CauseError, Err: watchtest.ConnectionRefused(), Failures: 12, Trouble: 5 * time.Minute},
			Verdict{Outcome: OutcomeError, Class: ClassTransient, Publish: true, State: blocked(ReasonProgressDeadlineExceeded, true), Next: NextResume, Wait: WaitBackoff}},
		{"flapping past the progress deadline needs a human", Ending{Stage: StageStream, Cause: CauseClosed, ShortCloses: 40, FlapReplayed: true, Failures: 40, Trouble: 6 * time.Minute},
			Verdict{Outcome: OutcomeClosed, Class: ClassNone, ShortClose: true, Publish: true, State: blocked(ReasonProgressDeadlineExceeded, true), Next: NextResume, Wait: WaitBackoff}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Grade(tt.in, Policy{})
			if diff := cmp.Diff(tt.want, got, ignoreMessage); diff != "" {
				t.Errorf("Grade(%+v) mismatch (-want +got):\n%s", tt.in, diff)
			}
			if got.Publish && got.State.Message == "" {
				t.Errorf("Grade(%+v) publishes a state with no message", tt.in)
			}
		})
	}
}

func TestGradePolicyThresholds(t *testing.T) {
	p := Policy{HumanGrace: time.Minute, FlapAfter: 5}
	e := Ending{Stage: StageOpen, Cause: CauseError, Err: watchtest.Forbidden(), Failures: 4, Trouble: 30 * time.Second}
	if got := Grade(e, p); got.Publish {
		t.Errorf("Grade(%+v, HumanGrace 1m) publishes %v, want nothing within the grace", e, got.State)
	}
	e = Ending{Stage: StageStream, Cause: CauseClosed, ShortCloses: 3, FlapReplayed: true, Failures: 3}
	if got := Grade(e, p); got.Publish {
		t.Errorf("Grade(%+v, FlapAfter 5) publishes %v, want nothing below FlapAfter", e, got.State)
	}
}

func TestGradeMessageIsBounded(t *testing.T) {
	long := errors.New(strings.Repeat("é", 10000))
	e := Ending{Stage: StageOpen, Cause: CauseError, Err: long, Failures: 1, Trouble: time.Hour}
	v := Grade(e, Policy{})
	if n := len(v.State.Message); n > 1024 {
		t.Errorf("Grade(10000-rune error).State.Message has %d bytes, want at most 1024", n)
	}
	if !strings.HasSuffix(v.State.Message, "…") {
		t.Errorf("Grade(10000-rune error).State.Message = %q, want a truncation mark", v.State.Message[len(v.State.Message)-10:])
	}
}

func TestClassify(t *testing.T) {
	tests := []struct {
		name       string
		err        error
		wantClass  Class
		wantReason Reason
	}{
		{"nil", nil, ClassNone, ""},
		{"410 Expired", watchtest.Expired(), ClassExpired, ReasonExpiredResourceVersion},
		{"410 Gone", watchtest.Gone(), ClassExpired, ReasonExpiredResourceVersion},
		{"code 410 with no reason", &apierrors.StatusError{ErrStatus: metav1.Status{Code: 410}}, ClassExpired, ReasonExpiredResourceVersion},
		{"reason Expired with no code", &apierrors.StatusError{ErrStatus: metav1.Status{Reason: metav1.StatusReasonExpired}}, ClassExpired, ReasonExpiredResourceVersion},
		{"wrapped 410", fmt.Errorf("watch: %w", watchtest.Expired()), ClassExpired, ReasonExpiredResourceVersion},
		{"401", apierrors.NewUnauthorized("x"), ClassNeedsHuman, ReasonUnauthorized},
		{"403", watchtest.Forbidden(), ClassNeedsHuman, ReasonForbidden},
		{"404", watchtest.NotFound(), ClassNeedsHuman, ReasonResourceNotFound},
		{"400", apierrors.NewBadRequest("x"), ClassNeedsHuman, ReasonInvalidRequest},
		{"405", apierrors.NewMethodNotSupported(schema.GroupResource{Resource: "x"}, "watch"), ClassNeedsHuman, ReasonInvalidRequest},
		{"422", apierrors.NewInvalid(schema.GroupKind{Kind: "X"}, "x", nil), ClassNeedsHuman, ReasonInvalidRequest},
		{"429", watchtest.TooManyRequests(1), ClassTransient, ReasonTooManyRequests},
		{"500", apierrors.NewInternalError(errors.New("x")), ClassTransient, ReasonServerError},
		{"503", apierrors.NewServiceUnavailable("x"), ClassTransient, ReasonServerError},
		{"504", apierrors.NewTimeoutError("x", 1), ClassTransient, ReasonTimeout},
		{"server timeout", apierrors.NewServerTimeout(schema.GroupResource{Resource: "x"}, "watch", 1), ClassTransient, ReasonTimeout},
		{"409 (unexpected here)", apierrors.NewConflict(schema.GroupResource{Resource: "x"}, "x", errors.New("x")), ClassTransient, ReasonWatchFailed},
		{"connection refused", watchtest.ConnectionRefused(), ClassTransient, ReasonConnectionFailed},
		{"EOF", io.EOF, ClassTransient, ReasonConnectionFailed},
		{"deadline", context.DeadlineExceeded, ClassTransient, ReasonTimeout},
		{"unexpected object in an ERROR event", apierrorsFromObject(watchtest.ConfigMap("x", "1")), ClassTransient, ReasonWatchFailed},
		{"anything else", errors.New("boom"), ClassTransient, ReasonWatchFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			class, reason := Classify(tt.err)
			if class != tt.wantClass || reason != tt.wantReason {
				t.Errorf("Classify(%v) = %v, %v; want %v, %v", tt.err, class, reason, tt.wantClass, tt.wantReason)
			}
		})
	}
}

// FuzzGrade checks that Grade is total: any status the server could send, in
// any stage and cause, with any history, gives a verdict that is one of the
// documented values, and never panics.
func FuzzGrade(f *testing.F) {
	f.Add(int32(410), "Expired", "too old", int32(0), uint8(0), uint8(1), int64(0), 0, false, int64(0), 0, false, false)
	f.Add(int32(403), "Forbidden", "no", int32(0), uint8(1), uint8(1), int64(time.Second), 3, true, int64(time.Minute), 2, true, false)
	f.Add(int32(0), "", "", int32(-5), uint8(3), uint8(0), int64(-1), -1, false, int64(-time.Hour), -3, false, true)
	f.Fuzz(func(t *testing.T, code int32, reason, message string, retryAfter int32, stage, cause uint8,
		dur int64, events int, moved bool, trouble int64, shorts int, flapReplayed, ownerDone bool) {
		stages := []Stage{StageList, StageOpen, StageReplay, StageStream, Stage(reason)}
		causes := []Cause{CauseClosed, CauseError, CauseBadEvent, CauseHandler, CauseReplayDeadline, Cause(message)}
		var err error
		if code != 0 || reason != "" {
			st := metav1.Status{Code: code, Reason: metav1.StatusReason(reason), Message: message}
			if retryAfter != 0 {
				st.Details = &metav1.StatusDetails{RetryAfterSeconds: retryAfter}
			}
			err = apierrorsFromObject(&st)
		}
		e := Ending{
			OwnerDone: ownerDone, Stage: stages[int(stage)%len(stages)], Cause: causes[int(cause)%len(causes)],
			Err: err, Duration: time.Duration(dur), Events: events, CursorMoved: moved,
			Failures: shorts, Trouble: time.Duration(trouble), ShortCloses: shorts, FlapReplayed: flapReplayed,
		}
		v := Grade(e, Policy{})
		if !oneOf(v.Outcome, Outcomes()...) || !oneOf(v.Class, Classes()...) ||
			!oneOf(v.Next, NextStop, NextResume, NextReplay) || !oneOf(v.Wait, WaitNone, WaitBackoff, WaitSlow) {
			t.Fatalf("Grade(%+v) = %+v: a value outside the documented sets", e, v)
		}
		if ownerDone && v.Outcome != OutcomeTeardown {
			t.Fatalf("Grade(%+v).Outcome = %v, want teardown", e, v.Outcome)
		}
		if v.Publish && (!oneOf(v.State.Phase, Phases()...) || v.State.Reason == "" || v.State.Message == "") {
			t.Fatalf("Grade(%+v) publishes an incomplete state %+v", e, v.State)
		}
		if v.RetryAfter < 0 {
			t.Fatalf("Grade(%+v).RetryAfter = %v, want >= 0", e, v.RetryAfter)
		}
	})
}

func oneOf[T comparable](v T, set ...T) bool {
	for _, s := range set {
		if v == s {
			return true
		}
	}
	return false
}

func TestGradeMessageDropsRequestQuery(t *testing.T) {
	err := &url.Error{Op: "Get", URL: "https://10.0.0.1:6443/api/v1/configmaps?resourceVersion=123&watch=true", Err: watchtest.ConnectionRefused()}
	v := Grade(Ending{Stage: StageOpen, Cause: CauseError, Err: err, Failures: 3, Trouble: time.Minute}, Policy{})
	if strings.Contains(v.State.Message, "resourceVersion") || !strings.Contains(v.State.Message, "/api/v1/configmaps") {
		t.Errorf("Grade(url.Error).State.Message = %q, want the path without the query", v.State.Message)
	}
}

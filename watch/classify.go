package watch

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Class is the class of an error that ended a session.
type Class string

const (
	// ClassNone: no error (a clean close, a teardown).
	ClassNone Class = "none"
	// ClassExpired: the cursor cannot be served: it expired, or the server
	// has not reached it. Routine: the stream replays.
	ClassExpired Class = "expired"
	// ClassTransient: expected to heal by itself (429, 5xx, timeouts,
	// connection errors, anything unknown).
	ClassTransient Class = "transient"
	// ClassNeedsHuman: will not heal until someone acts (401, 403, 404, 400,
	// 405, 422, a refused TLS certificate).
	ClassNeedsHuman Class = "needs_human"
)

// Classes returns every Class, in a fixed order.
func Classes() []Class {
	return []Class{ClassNone, ClassExpired, ClassTransient, ClassNeedsHuman}
}

// Classify sorts an error from a List or Watch call, or one decoded from an
// ERROR event with [apierrors.FromObject], into a Class and the Reason to
// publish. A nil error is ClassNone. It looks through wrapped errors, never
// at error text, and is total: every error gets a class.
//
//	error                                                   class         reason
//	------------------------------------------------------  ------------  ----------------------------
//	Status code 410, or reason Expired or Gone              expired       ExpiredResourceVersion
//	504 with cause ResourceVersionTooLarge                  expired       ResourceVersionTooLarge
//	ErrCursorAhead (the stream's check of its cursor)       expired       ResourceVersionTooLarge
//	401 / Unauthorized                                      needs human   Unauthorized
//	403 / Forbidden                                         needs human   Forbidden
//	404 / NotFound                                          needs human   ResourceNotFound
//	400, 405, 422 / BadRequest, MethodNotAllowed, Invalid   needs human   InvalidRequest
//	429 / TooManyRequests                                   transient     TooManyRequests
//	504, Timeout, ServerTimeout, context deadline           transient     Timeout
//	500, 503 and any other 5xx                              transient     ServerError
//	a TLS certificate refused (x509), a non-TLS server      needs human   CertificateInvalid
//	io.EOF, connection refused or reset, net.Error          transient     ConnectionFailed
//	anything else                                           transient     WatchFailed
func Classify(err error) (Class, Reason) {
	if err == nil {
		return ClassNone, ""
	}
	if errors.Is(err, ErrCursorAhead) {
		return ClassExpired, ReasonResourceVersionTooLarge
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		s := status.Status()
		switch {
		case s.Code == http.StatusGone || s.Reason == metav1.StatusReasonExpired || s.Reason == metav1.StatusReasonGone:
			return ClassExpired, ReasonExpiredResourceVersion
		case apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge):
			return ClassExpired, ReasonResourceVersionTooLarge
		case s.Code == http.StatusUnauthorized || s.Reason == metav1.StatusReasonUnauthorized:
			return ClassNeedsHuman, ReasonUnauthorized
		case s.Code == http.StatusForbidden || s.Reason == metav1.StatusReasonForbidden:
			return ClassNeedsHuman, ReasonForbidden
		case s.Code == http.StatusNotFound || s.Reason == metav1.StatusReasonNotFound:
			return ClassNeedsHuman, ReasonResourceNotFound
		case s.Code == http.StatusBadRequest || s.Code == http.StatusMethodNotAllowed ||
			s.Code == http.StatusUnprocessableEntity || s.Reason == metav1.StatusReasonBadRequest ||
			s.Reason == metav1.StatusReasonMethodNotAllowed || s.Reason == metav1.StatusReasonInvalid:
			return ClassNeedsHuman, ReasonInvalidRequest
		case s.Code == http.StatusTooManyRequests || s.Reason == metav1.StatusReasonTooManyRequests:
			return ClassTransient, ReasonTooManyRequests
		case s.Code == http.StatusGatewayTimeout || s.Reason == metav1.StatusReasonTimeout ||
			s.Reason == metav1.StatusReasonServerTimeout:
			return ClassTransient, ReasonTimeout
		case s.Code >= 500:
			return ClassTransient, ReasonServerError
		}
		return ClassTransient, ReasonWatchFailed
	}
	if certificateRefused(err) {
		return ClassNeedsHuman, ReasonCertificateInvalid
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return ClassTransient, ReasonTimeout
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET):
		return ClassTransient, ReasonConnectionFailed
	}
	var netErr net.Error
	if errors.As(err, &netErr) {
		if netErr.Timeout() {
			return ClassTransient, ReasonTimeout
		}
		return ClassTransient, ReasonConnectionFailed
	}
	return ClassTransient, ReasonWatchFailed
}

// certificateRefused reports whether err is the client refusing the
// server's TLS certificate, or a server that does not speak TLS.
func certificateRefused(err error) bool {
	var (
		verify   *tls.CertificateVerificationError
		header   tls.RecordHeaderError
		unknown  x509.UnknownAuthorityError
		invalid  x509.CertificateInvalidError
		hostname x509.HostnameError
	)
	return errors.As(err, &verify) || errors.As(err, &header) || errors.As(err, &unknown) ||
		errors.As(err, &invalid) || errors.As(err, &hostname)
}

// retryAfter returns the server's Retry-After hint carried by err, or zero.
func retryAfter(err error) time.Duration {
	if err == nil {
		return 0
	}
	if seconds, ok := apierrors.SuggestsClientDelay(err); ok && seconds > 0 {
		return time.Duration(seconds) * time.Second
	}
	return 0
}

package watchtest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/watch"
)

// The etcd3 store's answers to a continue token or an exact list that a
// compaction has made too old (k8s.io/apiserver storage/etcd3/errors.go).
const (
	listTooOld           = "The resourceVersion for the provided list is too old."
	inconsistentContinue = "The provided continue parameter is too old to display a consistent list result. " +
		"You can start a new list without the continue parameter, or use the continue token in this response " +
		"to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent " +
		"list - objects that were created, modified, or deleted between the time the first chunk was returned " +
		"and now may show up in the list."
)

// List calls ListWithContext with a background context.
func (s *Server) List(options metav1.ListOptions) (runtime.Object, error) {
	return s.ListWithContext(context.Background(), options)
}

// ListWithContext lists the collection as the kube-apiserver 1.37 does:
//
//   - resourceVersion "" is a consistent read of the current state,
//     paginated by Limit with continue tokens;
//   - "0" is served from the watch cache, whole (Limit is ignored);
//   - any other with resourceVersionMatch NotOlderThan, or with none and
//     no Limit, is the watch cache's current state, unless the cache has
//     not reached it: then it answers "too large resource version" (504
//     with cause ResourceVersionTooLarge) after 3 seconds;
//   - with resourceVersionMatch Exact, or with none and a Limit (the
//     legacy exact list), the state at that resourceVersion, paginated:
//     410 "too old" once compacted;
//   - a continue token continues its list at the list's resourceVersion;
//     once compacted it gets etcd's 410 "inconsistent continue", whose
//     Status carries a new continue token that lists the rest at the
//     current state.
//
// While a restarted watch cache initialises, a LIST with a Limit (and no
// selector) is served from etcd and any other gets 429. A LIST takes
// [Latency] time; it is a snapshot of the moment it was made.
func (s *Server) ListWithContext(ctx context.Context, options metav1.ListOptions) (runtime.Object, error) {
	s.mu.Lock()
	req := s.recordLocked(CallList, options)
	r := s.listLocked(options, s.clock.Now())
	s.mu.Unlock()
	if r.wait {
		if err := s.sleep(ctx, blockTimeout); err != nil {
			return nil, s.failList(req, err)
		}
		if r.fallback {
			// The consistent read falls back to etcd (the delegator, with
			// ConsistentListFromCacheSkipTimeoutFallback off as in 1.37).
			s.mu.Lock()
			r.list, r.n = s.pageLocked(s.rv, s.stateAtLocked(s.rv), options.Limit, nil)
			s.mu.Unlock()
		}
	}
	// A refused connection answers at once; so does a list answered
	// "too large" after its wait, which was its time.
	if !s.opts.Latency.Off && (r.err == nil || (!isConnectionError(r.err) && !r.wait)) {
		if err := s.sleep(ctx, s.opts.Latency.Request+time.Duration(r.n)*s.opts.Latency.PerObject); err != nil {
			return nil, s.failList(req, err)
		}
	}
	if r.err != nil {
		return nil, s.failList(req, r.err)
	}
	s.mu.Lock()
	if m, err := meta.ListAccessor(r.list); err == nil {
		req.ResourceVersion = m.GetResourceVersion()
	}
	req.Answered = s.clock.Now()
	s.mu.Unlock()
	return r.list, nil
}

func (s *Server) failList(req *Request, err error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	req.Err, req.Answered = err, s.clock.Now()
	return err
}

type listResult struct {
	list runtime.Object
	n    int // items in list
	// wait: the answer comes after blockTimeout; fallback: and it is then
	// served from etcd at its current state.
	wait, fallback bool
	err            error
}

func (s *Server) listLocked(options metav1.ListOptions, now time.Time) listResult {
	s.autoCompactLocked(now)
	fail := func(err error) listResult { return listResult{err: err} }
	if err := s.requestFaultLocked(CallList, options); err != nil {
		return fail(err)
	}
	if errs := validateList(options); len(errs) > 0 {
		return fail(invalidOptions(errs...))
	}
	if options.Continue != "" {
		return s.continueLocked(options, now)
	}
	var rv int64
	if options.ResourceVersion != "" {
		var err error
		if rv, err = strconv.ParseInt(options.ResourceVersion, 10, 64); err != nil || rv < 0 {
			return fail(apierrors.NewBadRequest(fmt.Sprintf("invalid resource version %q", options.ResourceVersion)))
		}
	}
	exact := options.ResourceVersionMatch == metav1.ResourceVersionMatchExact ||
		(options.ResourceVersionMatch == "" && options.Limit > 0 && rv > 0)
	notReady := s.notReadyLocked(now)
	switch {
	case notReady != nil && options.Limit > 0:
		// The delegator hands the list to etcd (KEP-4568).
		if exact {
			return s.exactLocked(rv, options.Limit, now)
		}
		if rv > s.rv {
			return fail(tooLarge(rv, s.rv))
		}
		return s.pageResult(s.rv, s.stateAtLocked(s.rv), options.Limit, nil)
	case notReady != nil:
		return fail(notReady)
	case exact:
		if rv > s.cacheRV {
			return listResult{wait: true, err: tooLarge(rv, s.cacheRV)}
		}
		return s.exactLocked(rv, options.Limit, now)
	case options.ResourceVersion == "":
		if s.cacheRV < s.rv {
			return listResult{wait: true, fallback: true}
		}
		return s.pageResult(s.rv, s.stateAtLocked(s.rv), options.Limit, nil)
	case rv == 0:
		return s.pageResult(s.cacheRV, s.stateAtLocked(s.cacheRV), 0, nil)
	case rv > s.cacheRV:
		return listResult{wait: true, err: tooLarge(rv, s.cacheRV)}
	default:
		return s.pageResult(s.cacheRV, s.stateAtLocked(s.cacheRV), options.Limit, nil)
	}
}

// validateList holds the API server's validation of a LIST's options.
func validateList(options metav1.ListOptions) field.ErrorList {
	var errs field.ErrorList
	path := field.NewPath("resourceVersionMatch")
	if match := options.ResourceVersionMatch; match != "" {
		if options.ResourceVersion == "" {
			errs = append(errs, field.Forbidden(path, "resourceVersionMatch is forbidden unless resourceVersion is provided"))
		}
		if options.Continue != "" {
			errs = append(errs, field.Forbidden(path, "resourceVersionMatch is forbidden when continue is provided"))
		}
		if match != metav1.ResourceVersionMatchExact && match != metav1.ResourceVersionMatchNotOlderThan {
			errs = append(errs, field.NotSupported(path, match, []string{string(metav1.ResourceVersionMatchExact), string(metav1.ResourceVersionMatchNotOlderThan), ""}))
		}
		if match == metav1.ResourceVersionMatchExact && options.ResourceVersion == "0" {
			errs = append(errs, field.Forbidden(path, `resourceVersionMatch "exact" is forbidden for resourceVersion "0"`))
		}
	}
	if options.SendInitialEvents != nil {
		errs = append(errs, field.Forbidden(field.NewPath("sendInitialEvents"), "sendInitialEvents is forbidden for list"))
	}
	return errs
}

// exactLocked lists the state at rv, from a snapshot of the watch cache
// or from etcd.
func (s *Server) exactLocked(rv, limit int64, now time.Time) listResult {
	if rv < s.compacted && !s.cacheServesExactLocked(rv, now) {
		return listResult{err: apierrors.NewResourceExpired(listTooOld)}
	}
	if rv > s.rv {
		return listResult{err: tooLarge(rv, s.rv)}
	}
	return s.pageResult(rv, s.stateAtLocked(rv), limit, nil)
}

// continueLocked serves a continue token, from a snapshot of the watch
// cache or from etcd.
func (s *Server) continueLocked(options metav1.ListOptions, now time.Time) listResult {
	tok, err := decodeContinue(options.Continue)
	if err != nil {
		return listResult{err: apierrors.NewBadRequest(fmt.Sprintf("invalid continue token: %v", err))}
	}
	rv := tok.RV
	switch {
	case rv > 0 && rv < s.compacted && !s.cacheServesExactLocked(rv, now):
		expired := apierrors.NewResourceExpired(inconsistentContinue)
		expired.ErrStatus.ListMeta.Continue = encodeContinue(continueToken{RV: -1, Start: tok.Start})
		return listResult{err: expired}
	case rv > s.rv:
		return listResult{err: tooLarge(rv, s.rv)}
	case rv <= 0:
		rv = s.rv
	}
	return s.pageResult(rv, s.stateAtLocked(rv), options.Limit, &tok.Start)
}

func (s *Server) pageResult(rv int64, items []runtime.Object, limit int64, start *string) listResult {
	list, n := s.pageLocked(rv, items, limit, start)
	return listResult{list: list, n: n}
}

// pageLocked builds a list at rv of the items from start on (their keys
// in etcd's order), at most limit long (0: all), with a continue token
// for the rest.
func (s *Server) pageLocked(rv int64, items []runtime.Object, limit int64, start *string) (runtime.Object, int) {
	if start != nil {
		for len(items) > 0 && etcdKey(items[0]) < *start {
			items = items[1:]
		}
	}
	list := newOf(s.opts.List)
	more := limit > 0 && int64(len(items)) > limit
	if more {
		items = items[:limit]
	}
	_ = meta.SetList(list, items)
	lm, _ := meta.ListAccessor(list)
	lm.SetResourceVersion(strconv.FormatInt(rv, 10))
	if more {
		lm.SetContinue(encodeContinue(continueToken{RV: rv, Start: etcdKey(items[len(items)-1]) + "\x00"}))
	}
	return list, len(items)
}

// stateAtLocked rebuilds the collection as it was at rv, in etcd's key
// order.
func (s *Server) stateAtLocked(rv int64) []runtime.Object {
	if rv >= s.rv {
		return s.sortedLocked()
	}
	state := map[objectKey]runtime.Object{}
	for _, c := range s.history {
		if c.rv > rv {
			break
		}
		key, _ := keyOf(c.obj)
		if c.typ == watch.Deleted {
			delete(state, key)
		} else {
			state[key] = c.obj
		}
	}
	return sortedCopies(state)
}

// etcdKey is an object's key below the collection's prefix in etcd,
// which orders a list.
func etcdKey(obj runtime.Object) string {
	k, _ := keyOf(obj)
	return k.String()
}

func (k objectKey) String() string {
	if k.namespace == "" {
		return k.name
	}
	return k.namespace + "/" + k.name
}

// continueToken is a continue token's content, encoded as the API server
// encodes it (storage/continue.go): base64url of JSON.
type continueToken struct {
	APIVersion string `json:"v"`
	RV         int64  `json:"rv"`
	Start      string `json:"start"`
}

func encodeContinue(t continueToken) string {
	t.APIVersion = "meta.k8s.io/v1"
	b, _ := json.Marshal(t)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeContinue(token string) (continueToken, error) {
	var t continueToken
	b, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		return t, fmt.Errorf("continue key is not valid: %w", err)
	}
	if err := json.Unmarshal(b, &t); err != nil {
		return t, fmt.Errorf("continue key is not valid: %w", err)
	}
	switch {
	case t.APIVersion != "meta.k8s.io/v1":
		return t, fmt.Errorf("continue key is not valid: server does not recognize this encoded key")
	case t.RV == 0:
		return t, fmt.Errorf("continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)")
	case t.Start == "":
		return t, fmt.Errorf("continue key is not valid: encoded start key empty (version meta.k8s.io/v1)")
	}
	return t, nil
}

package metrics

import (
	"k8s.io/apimachinery/pkg/types"
)

// claimState is what the time-to-first-Ready accounting knows about one
// object.
type claimState uint8

const (
	// claimPending: seen without Ready=True and never established; its first
	// Ready=True is to be observed.
	claimPending claimState = iota + 1
	// claimDone: observed, rejected, or established before this process
	// saw it. Nothing more is ever observed for it.
	claimDone
	// claimUnwitnessed: seen first with no Ready condition, but created
	// before the tracker could see creations; its first Ready=True is
	// counted as not witnessed, never observed.
	claimUnwitnessed

	// claimStalled marks a pending or unwitnessed claim whose first
	// outcome was a Stalled=True: its first Ready=True is still timed, but
	// is not a first outcome.
	claimStalled claimState = 0x80
)

// claim is one object's entry: 8 bytes with its padding.
type claim struct {
	// gen is the sweep generation in which the object was last seen.
	gen   uint32
	state claimState
}

// claims maps object UIDs to their claims. API servers give every object a
// UUID, which is held as its 16 bytes rather than as a 36-byte string;
// other UIDs (tests, unusual servers) go to a second map. Not safe for
// concurrent use: the caller holds a lock.
type claims struct {
	uuids map[[16]byte]claim
	other map[types.UID]claim
	// gen is the current sweep generation.
	gen uint32
	// peak is the most claims held since the maps were last rebuilt: Go
	// maps never shrink, so a sweep that finds far fewer rebuilds them.
	peak int
}

func newClaims() claims {
	return claims{uuids: make(map[[16]byte]claim), other: make(map[types.UID]claim)}
}

func (c *claims) get(uid types.UID) (claim, bool) {
	if k, ok := parseUUID(uid); ok {
		v, ok := c.uuids[k]
		return v, ok
	}
	v, ok := c.other[uid]
	return v, ok
}

// put stores state for uid, stamped with the current generation.
func (c *claims) put(uid types.UID, state claimState) {
	v := claim{gen: c.gen, state: state}
	if k, ok := parseUUID(uid); ok {
		c.uuids[k] = v
	} else {
		c.other[uid] = v
	}
	c.peak = max(c.peak, c.len())
}

func (c *claims) delete(uid types.UID) {
	if k, ok := parseUUID(uid); ok {
		delete(c.uuids, k)
		return
	}
	delete(c.other, uid)
}

func (c *claims) len() int { return len(c.uuids) + len(c.other) }

// sweep starts a new generation and drops every claim not seen in this
// generation or the one before it. When at most a quarter of the peak is
// left, it copies what is left into fresh maps, so that memory follows the
// live objects down as well as up.
func (c *claims) sweep() {
	c.gen++
	for k, v := range c.uuids {
		if c.gen-v.gen > 1 {
			delete(c.uuids, k)
		}
	}
	for k, v := range c.other {
		if c.gen-v.gen > 1 {
			delete(c.other, k)
		}
	}
	if n := c.len(); n*4 <= c.peak {
		uuids := make(map[[16]byte]claim, len(c.uuids))
		for k, v := range c.uuids {
			uuids[k] = v
		}
		other := make(map[types.UID]claim, len(c.other))
		for k, v := range c.other {
			other[k] = v
		}
		c.uuids, c.other, c.peak = uuids, other, n
	}
}

// parseUUID parses the canonical 36-character form of a UUID
// (8-4-4-4-12 lower-case hex digits), the form API servers write. Only one
// spelling parses, so two UIDs that differ never share a key.
func parseUUID(uid types.UID) ([16]byte, bool) {
	var out [16]byte
	s := string(uid)
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return out, false
	}
	j := 0
	for i := 0; i < 36; {
		if i == 8 || i == 13 || i == 18 || i == 23 {
			i++
			continue
		}
		hi, ok1 := unhex(s[i])
		lo, ok2 := unhex(s[i+1])
		if !ok1 || !ok2 {
			return out, false
		}
		out[j] = hi<<4 | lo
		j++
		i += 2
	}
	return out, true
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

package metrics

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestReadyDuration(t *testing.T) {
	created := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *metav1.Time { t := metav1.NewTime(created.Add(d)); return &t }
	entry := func(manager, subresource string, tm *metav1.Time) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, Subresource: subresource, Time: tm}
	}
	readyAt := func(d time.Duration) *metav1.Condition {
		return &metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, LastTransitionTime: *at(d)}
	}
	type want struct {
		D      time.Duration
		Reason RejectReason
	}
	tests := []struct {
		name    string
		created *metav1.Time
		fields  []metav1.ManagedFieldsEntry
		ready   *metav1.Condition
		want    want
	}{{
		name:    "the latest status write wins over lastTransitionTime and main-resource writes",
		created: at(0),
		fields: []metav1.ManagedFieldsEntry{
			entry("kubectl", "", at(time.Hour)),
			entry("myctl", "status", at(42*time.Second)),
			entry("other", "status", at(30*time.Second)),
		},
		ready: readyAt(40 * time.Second),
		want:  want{D: 42 * time.Second},
	}, {
		name:    "no status entry: lastTransitionTime",
		created: at(0),
		fields:  []metav1.ManagedFieldsEntry{entry("kubectl", "", at(time.Hour))},
		ready:   readyAt(40 * time.Second),
		want:    want{D: 40 * time.Second},
	}, {
		name:    "a status entry without a time is skipped",
		created: at(0),
		fields:  []metav1.ManagedFieldsEntry{entry("myctl", "status", nil), entry("x", "status", &metav1.Time{})},
		ready:   readyAt(40 * time.Second),
		want:    want{D: 40 * time.Second},
	}, {
		name:    "Ready within the second of creation takes 0 s",
		created: at(0),
		fields:  []metav1.ManagedFieldsEntry{entry("myctl", "status", at(0))},
		want:    want{D: 0},
	}, {
		name:    "exactly the bound is plausible",
		created: at(0),
		fields:  []metav1.ManagedFieldsEntry{entry("myctl", "status", at(DefaultMaxDuration))},
		want:    want{D: DefaultMaxDuration},
	}, {
		name:   "no creationTimestamp",
		fields: []metav1.ManagedFieldsEntry{entry("myctl", "status", at(42*time.Second))},
		want:   want{Reason: RejectMissingCreation},
	}, {
		name:    "no end time at all",
		created: at(0),
		ready:   &metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue},
		want:    want{Reason: RejectMissingReadyTime},
	}, {
		name:    "no end time and no condition",
		created: at(0),
		want:    want{Reason: RejectMissingReadyTime},
	}, {
		name:    "a writer's clock behind the API server's",
		created: at(0),
		ready:   readyAt(-3 * time.Second),
		want:    want{Reason: RejectReversed},
	}, {
		name:    "a status write before the creation",
		created: at(0),
		fields:  []metav1.ManagedFieldsEntry{entry("myctl", "status", at(-time.Second))},
		want:    want{Reason: RejectReversed},
	}, {
		name:    "longer than the bound",
		created: at(0),
		fields:  []metav1.ManagedFieldsEntry{entry("myctl", "status", at(DefaultMaxDuration+time.Second))},
		want:    want{Reason: RejectTooLong},
	}, {
		name:    "a zero-ish creationTimestamp makes an absurd duration",
		created: &metav1.Time{Time: time.Unix(1, 0)},
		fields:  []metav1.ManagedFieldsEntry{entry("myctl", "status", at(0))},
		want:    want{Reason: RejectTooLong},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj := &metav1.ObjectMeta{UID: types.UID("u"), ManagedFields: tt.fields}
			if tt.created != nil {
				obj.CreationTimestamp = *tt.created
			}
			var got want
			got.D, got.Reason = readyDuration(obj, tt.ready, DefaultMaxDuration)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("readyDuration() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseUUID(t *testing.T) {
	tests := []struct {
		name   string
		uid    types.UID
		wantOK bool
		want   [16]byte
	}{
		{name: "canonical", uid: "00112233-4455-6677-8899-aabbccddeeff", wantOK: true,
			want: [16]byte{0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff}},
		{name: "upper case is kept as a string", uid: "00112233-4455-6677-8899-AABBCCDDEEFF"},
		{name: "no dashes", uid: "00112233445566778899aabbccddeeff"},
		{name: "dash misplaced", uid: "0011223-34455-6677-8899-aabbccddeeff"},
		{name: "not hex", uid: "00112233-4455-6677-8899-aabbccddeegg"},
		{name: "empty", uid: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := parseUUID(tt.uid)
			if ok != tt.wantOK || (ok && got != tt.want) {
				t.Errorf("parseUUID(%q) = %x, %v, want %x, %v", tt.uid, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestClaimsSweepShrinks(t *testing.T) {
	c := newClaims()
	for i := range 1000 {
		c.put(types.UID(uuidFor(i)), claimPending)
	}
	c.put("plain", claimDone)
	c.sweep()
	for i := range 10 {
		c.put(types.UID(uuidFor(i)), claimDone)
	}
	c.sweep()
	got := struct{ Len, Peak int }{c.len(), c.peak}
	want := struct{ Len, Peak int }{10, 10}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("after two sweeps (-want +got):\n%s", diff)
	}
	if v, ok := c.get(types.UID(uuidFor(3))); !ok || v.state != claimDone {
		t.Errorf("get(kept) = %v, %v, want a done claim", v, ok)
	}
}

// uuidFor returns a distinct canonical UUID for i.
func uuidFor(i int) string {
	const hex = "0123456789abcdef"
	b := []byte("00000000-0000-4000-8000-000000000000")
	for pos := len(b) - 1; i > 0 && pos >= 0; pos-- {
		if b[pos] == '-' {
			continue
		}
		b[pos] = hex[i%16]
		i /= 16
	}
	return string(b)
}

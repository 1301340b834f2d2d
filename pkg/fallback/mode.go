package fallback

import "fmt"

// Mode says whether "up" runs the API server as revisions with a startup
// monitor and fallback (--static-pod-fallback).
type Mode string

const (
	// ModeAuto turns the fallback on where it can run: with static pods,
	// the controllers and the node agent's read-only endpoint.
	ModeAuto Mode = "auto"
	// ModeOn requires the fallback; "up" refuses options that leave it out.
	ModeOn Mode = "on"
	// ModeOff runs the API server from one manifest, without revisions.
	ModeOff Mode = "off"
)

// String implements pflag.Value.
func (m *Mode) String() string { return string(*m) }

// Set implements pflag.Value: only auto, on and off are accepted.
func (m *Mode) Set(v string) error {
	switch Mode(v) {
	case ModeAuto, ModeOn, ModeOff:
		*m = Mode(v)
		return nil
	}
	return fmt.Errorf("%q: auto, on or off", v)
}

// Type implements pflag.Value.
func (m *Mode) Type() string { return "auto|on|off" }

// Enabled says whether the fallback runs in this mode when it can run
// (possible: static pods, controllers and the node agent's endpoint).
func (m Mode) Enabled(possible bool) bool { return m != ModeOff && possible }

package wgctrl

import wgwatch "github.com/watchgrade/watchgrade/watch"

// StateChanged hands the Grader an informer's state, as an informer its
// hook built would.
func (g *Grader) StateChanged(s wgwatch.State) { g.stateChanged(s) }

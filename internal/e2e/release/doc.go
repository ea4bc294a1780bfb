// Package release checks that the repository can be released, and that a
// release works for its users, with no tag in the repository: the release
// is what the changelog records ([ChangelogPath]), and the checks build
// from it what the tags would publish.
//
// Its tests are two targets of `make test`. `make api` compares each
// released module's API with a snapshot of it as released ([ReadAPI],
// testdata/api/TAG.api) under the rule of [CheckAPI], and checks that the
// changelog names a module for each tag and that wgctrl requires the root
// module at its released version. `make release` publishes a commit (HEAD
// by default) to a local file GOPROXY as the Go module mirror would
// publish the recorded tags on it ([Publish]), then runs each `go get`
// line of the README in a fresh module with no replace directive and
// builds a program over what it got, as a user would.
package release

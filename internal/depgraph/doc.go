// Package depgraph holds only tests: they keep the library's import graph and
// its go.mod lean, since whatever the root module imports or requires reaches
// every user's build.
package depgraph

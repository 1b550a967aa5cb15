// Package keys holds the key rules of a GuardedJob: its key templates (a
// text/template dialect with pure string functions and bounded work, so a
// template cannot stall or grow a reconcile), rendering the lock, done-marker and
// fence keys of an occurrence, and the --key-grants that let namespaces use keys
// outside their own prefix in the manager's shared store. Rendered keys meet
// lockclient.ValidateKey.
package keys

// Package lockclient is a Redis lease client and the watchdog that keeps leases
// alive. It knows Redis and nothing of Kubernetes.
//
// A lease is a Redis string key whose value is the holder's token,
// "<cluster>/<namespace>/<job>#<random>", set with SET NX PX so that a key without
// an expiry never exists. Every change to a lease is one Lua script, so no other
// client can act between a read and a write:
//
//   - Acquire checks the type of every key it was given (writing nothing if one is
//     of another type), checks the occurrence's done-marker (deleting a key of the
//     caller's own when the occurrence is done), takes the key and increments the
//     fence counter in one call. Acquiring a key that already holds the caller's own
//     token extends it and hands out a new, higher fence.
//   - Renew extends the key only while it still holds the caller's token; otherwise
//     it reports who holds it now. Renewal never writes over another holder.
//   - Complete writes the occurrence's done-marker and deletes the key, both only if
//     the key holds the caller's token (or, for the marker, is absent).
//   - Release deletes the key only if it holds the caller's token.
//
// Results other than success are typed errors: *BusyError (another holder),
// *DoneError (the occurrence already succeeded), *NotHeldError (the lease is gone
// or taken), *WrongTypeError (a key of another type). Anything that kept Redis from answering is a *StoreError: a timeout is
// never read as "not held", and "not held" is never guessed from a failure.
//
// A lease held across Redis failover, a process pause or a clock jump can still
// overlap with another holder for a moment. Fences exist for that: each
// acquisition gets a number higher than any before it on the same counter, and
// downstream systems that reject writes carrying an older fence stay correct.
//
// A store URL with minReplicaAcks makes an acquisition wait until that many
// replicas have the lease (WAIT, on the acquiring connection); fewer is a
// *StoreError and the key is released. A redis+redlock store is N independent
// masters: every call goes to all of them and counts only with a majority, and
// a lease's SentAt and renewals count from the send time less a clock-drift
// allowance, since the nodes' clocks decide when their copies expire.
//
// The Keeper renews every tracked lease on its own goroutine and clock, batching the
// renewals that fall due together into one pipeline, and reports leases that were
// lost, that could not be renewed before their self-fence deadline, or that reached
// their maximum hold time. A lease's deadline counts only from evidence: the send
// time of an acquisition or renewal this process saw succeed, or what the caller
// proves (a recorded acquisition time); never from an assumed time.
package lockclient

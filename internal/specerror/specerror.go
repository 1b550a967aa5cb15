// Package specerror holds the error a GuardedJob spec problem is reported with:
// one that retrying cannot fix, so the manager sets Ready=False with its reason
// and message instead of retrying. The rule packages (schedule, keys, leasetiming)
// return it without depending on the API types, so they declare the reasons they
// use here; a test holds them equal to the api/v1alpha1 constants.
package specerror

import (
	"errors"
	"fmt"
)

// Ready=False reasons the rule packages return. Each equals the api/v1alpha1
// constant of the same name.
const (
	InvalidScheduleReason   = "InvalidSchedule"
	InvalidTimeZoneReason   = "InvalidTimeZone"
	InvalidTemplateReason   = "InvalidTemplate"
	InvalidKeyReason        = "InvalidKey"
	KeyNotAllowedReason     = "KeyNotAllowed"
	UnsafeLeaseTimingReason = "UnsafeLeaseTiming"
)

// Error is a spec problem that retrying cannot fix. Reason is the Ready=False
// reason (InvalidSchedule, InvalidTimeZone, InvalidTemplate, InvalidKey,
// KeyNotAllowed, UnsafeLeaseTiming, StoreSecretInvalid, ...) and Message says what
// to fix.
type Error struct {
	Reason  string
	Message string
}

// Error returns Message.
func (e *Error) Error() string { return e.Message }

// Errorf returns an *Error with reason and a formatted message.
func Errorf(reason, format string, args ...any) *Error {
	return &Error{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// As returns the *Error in err's chain, or nil when there is none.
func As(err error) *Error {
	var se *Error
	if errors.As(err, &se) {
		return se
	}
	return nil
}

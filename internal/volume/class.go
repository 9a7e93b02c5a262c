package volume

// The classes of refusal a kind's own named errors belong to. A kind
// (dirpool's ErrNotBtrfs, pool's ErrOtherNode) makes its errors with
// NewError in one of them; internal/csi maps the classes to gRPC codes, so
// the services answer a kind's refusals rightly without knowing its names,
// and a new kind adds errors without touching the services.
var (
	// ClassInvalid: the request asks for what the kind never does
	// (INVALID_ARGUMENT).
	ClassInvalid = classError("invalid request")
	// ClassPrecondition: not in this state, or not on this pool
	// (FAILED_PRECONDITION).
	ClassPrecondition = classError("failed precondition")
	// ClassExhausted: a resource the kind hands out ran out
	// (RESOURCE_EXHAUSTED).
	ClassExhausted = classError("exhausted")
	// ClassExists: something is in the way (ALREADY_EXISTS).
	ClassExists = classError("already exists")
)

type classError string

func (c classError) Error() string { return string(c) }

// NewError makes a named error of a kind: its message is msg alone, and
// errors.Is finds both the error itself and its class.
func NewError(class error, msg string) error { return &classed{msg: msg, class: class} }

type classed struct {
	msg   string
	class error
}

func (e *classed) Error() string { return e.msg }

// Is: the class is what the error is an instance of; it is not wrapped
// (errors.Unwrap finds nothing), so messages never grow a prefix.
func (e *classed) Is(target error) bool { return target == e.class }

package answer

import (
	"fmt"

	"google.golang.org/grpc/codes"
)

// CodedError is an error whose gRPC code its maker chose: a refusal that
// the named errors of the lower layers do not describe (a request this
// kind cannot serve, a state conflict). internal/csi answers it with
// Code; everything else goes through its error map.
type CodedError struct {
	Code codes.Code
	Msg  string
}

func (e *CodedError) Error() string { return e.Msg }

// Coded makes a CodedError with the message fmt.Sprintf(format, args...).
func Coded(c codes.Code, format string, args ...any) error {
	return &CodedError{Code: c, Msg: fmt.Sprintf(format, args...)}
}

// The codes a kind chooses; see the CSI spec for what each tells the CO.
func InvalidArgument(format string, args ...any) error {
	return Coded(codes.InvalidArgument, format, args...)
}
func NotFound(format string, args ...any) error { return Coded(codes.NotFound, format, args...) }
func FailedPrecondition(format string, args ...any) error {
	return Coded(codes.FailedPrecondition, format, args...)
}
func AlreadyExists(format string, args ...any) error {
	return Coded(codes.AlreadyExists, format, args...)
}
func OutOfRange(format string, args ...any) error { return Coded(codes.OutOfRange, format, args...) }
func ResourceExhausted(format string, args ...any) error {
	return Coded(codes.ResourceExhausted, format, args...)
}
func Aborted(format string, args ...any) error { return Coded(codes.Aborted, format, args...) }

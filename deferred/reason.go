package deferred

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"syscall"
)

// failedDelivery says what went wrong with one delivery attempt in words
// fit for a ticket's state: GET /v1/deferred/{ticket} needs no token (a
// ticket reaches end users through Location), so it names the kind of
// failure and never the target's URL, host, address or port, which an
// error of net/http quotes in full. The full error goes to the drain's
// log and the dead-letter record, which only operators read.
func failedDelivery(err error) string {
	var dns *net.DNSError
	var ne net.Error
	var verify *tls.CertificateVerificationError
	var alert tls.AlertError
	var record tls.RecordHeaderError
	var unknownCA x509.UnknownAuthorityError
	var badHost x509.HostnameError
	var badCert x509.CertificateInvalidError
	switch {
	case errors.Is(err, errOutsideTarget):
		return errOutsideTarget.Error()
	case errors.As(err, &dns):
		return "delivery failed: the target's host name did not resolve"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "delivery failed: the target did not answer in time"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "delivery failed: connection refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return "delivery failed: connection reset"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "delivery failed: the target is unreachable"
	case errors.As(err, &verify), errors.As(err, &alert), errors.As(err, &record),
		errors.As(err, &unknownCA), errors.As(err, &badHost), errors.As(err, &badCert):
		return "delivery failed: TLS handshake with the target failed"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "delivery failed: the target closed the connection"
	}
	return "delivery failed: the target could not be reached"
}

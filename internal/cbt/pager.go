package cbt

import "fmt"

// DefaultPage is how many ranges a response holds when the caller sets no
// max_results: about 4 KiB of protobuf, a few dozen pages for a volume
// with ten thousand fragments.
const DefaultPage = 256

// Pager turns ordered ranges into the messages of a CSI SnapshotMetadata
// stream: ranges that end at or before From are dropped and one that
// straddles it is cut to begin there (the spec: no tuple may end before
// starting_offset; a resumed stream goes on where the last one stopped),
// adjacent ranges are merged, and every Max ranges are sent as one
// message (DefaultPage when Max is not positive). At least one message is sent, empty when nothing is, so that a
// caller learns the volume's capacity from a snapshot with no data.
type Pager struct {
	From int64
	Max  int
	Send func([]Range) error

	pending Range
	batch   []Range
	sent    int
}

// Add takes the next range; ranges must come in order, never overlapping.
func (p *Pager) Add(r Range) error {
	if r.End() <= p.From || r.Length <= 0 {
		return nil
	}
	if r.Offset < p.From {
		r = Range{p.From, r.End() - p.From}
	}
	switch {
	case p.pending.Length == 0:
		p.pending = r
		return nil
	case r.Offset < p.pending.End():
		return fmt.Errorf("cbt: range %+v out of order after %+v", r, p.pending)
	case r.Offset == p.pending.End():
		p.pending.Length += r.Length
		return nil
	}
	err := p.push()
	p.pending = r
	return err
}

// push moves the pending range into the batch, sending it when full.
func (p *Pager) push() error {
	if p.pending.Length == 0 {
		return nil
	}
	p.batch = append(p.batch, p.pending)
	p.pending = Range{}
	if len(p.batch) >= p.size() {
		return p.flush()
	}
	return nil
}

func (p *Pager) flush() error {
	err := p.Send(p.batch)
	p.batch = nil
	p.sent++
	return err
}

// Close sends what is left: the last message of the stream.
func (p *Pager) Close() error {
	if err := p.push(); err != nil {
		return err
	}
	if len(p.batch) > 0 || p.sent == 0 {
		return p.flush()
	}
	return nil
}

func (p *Pager) size() int {
	if p.Max > 0 {
		return p.Max
	}
	return DefaultPage
}

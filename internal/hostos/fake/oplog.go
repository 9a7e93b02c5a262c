package fake

import (
	"slices"
	"sync"
)

// opLog is what a fake (Host, Locks) keeps of the calls made of it: one
// line per call, and the errors injected per operation. Its owner embeds
// it and guards it with its own mutex, the one that guards its state, so
// that a call's line and the outcome done adds to it are never seen apart.
type opLog struct {
	// mu is the owner's mutex: setFail and lines take it; record and done
	// are called with it held.
	mu   *sync.Mutex
	fail map[string]failure
	log  []string
}

type failure struct {
	err  error
	once bool
}

// setFail injects f for every later call of op (the next only, if
// f.once); a nil f.err clears it.
func (o *opLog) setFail(op string, f failure) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if f.err == nil {
		delete(o.fail, op)
		return
	}
	if o.fail == nil {
		o.fail = map[string]failure{}
	}
	o.fail[op] = f
}

// lines returns the calls logged so far.
func (o *opLog) lines() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.log)
}

// record logs line for a call of op and returns op's injected error, if
// any (the line then ends with it). Held: the owner's mutex.
func (o *opLog) record(op, line string) error {
	if f, ok := o.fail[op]; ok {
		if f.once {
			delete(o.fail, op)
		}
		o.log = append(o.log, line+": "+f.err.Error())
		return f.err
	}
	o.log = append(o.log, line)
	return nil
}

// done records the outcome of the call logged last. Held: the owner's
// mutex.
func (o *opLog) done(err error) error {
	if err != nil {
		o.log[len(o.log)-1] += ": " + err.Error()
	}
	return err
}

package generate

import (
	"errors"
	"flag"
	"fmt"
	"strconv"

	"github.com/draftflow/draftflow/topics"
)

// Override replaces sampling settings of every record this stage generates, whatever ingest wrote into it: how a
// topic already tokenized is generated again with other settings (see the README's Replay recipes). A nil field
// keeps the record's own value. The generation carries the settings it was made with, so the sink writes it to
// another run directory.
type Override struct {
	MaxNewTokens *int
	Temperature  *float64
	TopP         *float64
	TopK         *int
	MinP         *float64
	Seed         *int64
}

// Apply returns s with o's fields in place of its own.
func (o Override) Apply(s topics.Sampling) topics.Sampling {
	if o.MaxNewTokens != nil {
		s.MaxNewTokens = *o.MaxNewTokens
	}
	if o.Temperature != nil {
		t := *o.Temperature
		s.Temperature = &t
	}
	if o.TopP != nil {
		s.TopP = *o.TopP
	}
	if o.TopK != nil {
		s.TopK = *o.TopK
	}
	if o.MinP != nil {
		s.MinP = *o.MinP
	}
	if o.Seed != nil {
		v := *o.Seed
		s.Seed = &v
	}
	return s
}

// validate reports values SGLang would refuse for every request.
func (o Override) validate() error {
	var errs []error
	if o.MaxNewTokens != nil && *o.MaxNewTokens <= 0 {
		errs = append(errs, fmt.Errorf("--override-max-new-tokens %d: want a positive count", *o.MaxNewTokens))
	}
	if o.Temperature != nil && *o.Temperature < 0 {
		errs = append(errs, fmt.Errorf("--override-temperature %g: want 0 (greedy) or more", *o.Temperature))
	}
	if o.TopP != nil && (*o.TopP <= 0 || *o.TopP > 1) {
		errs = append(errs, fmt.Errorf("--override-top-p %g: want a value in (0, 1]", *o.TopP))
	}
	if o.MinP != nil && (*o.MinP < 0 || *o.MinP > 1) {
		errs = append(errs, fmt.Errorf("--override-min-p %g: want a value in [0, 1]", *o.MinP))
	}
	if o.TopK != nil && *o.TopK < -1 {
		errs = append(errs, fmt.Errorf("--override-top-k %d: want -1 (off) or more", *o.TopK))
	}
	return errors.Join(errs...)
}

// registerFlags adds the --override-* flags.
func (o *Override) registerFlags(fs *flag.FlagSet) {
	intFlag := func(p **int, name, usage string) {
		fs.Func(name, usage, func(v string) error {
			n, err := strconv.Atoi(v)
			*p = &n
			return err
		})
	}
	floatFlag := func(p **float64, name, usage string) {
		fs.Func(name, usage, func(v string) error {
			f, err := strconv.ParseFloat(v, 64)
			*p = &f
			return err
		})
	}
	intFlag(&o.MaxNewTokens, "override-max-new-tokens", "max_new_tokens of every record, replacing its own (regenerating with other settings)")
	floatFlag(&o.Temperature, "override-temperature", "temperature of every record, replacing its own")
	floatFlag(&o.TopP, "override-top-p", "top_p of every record, replacing its own")
	intFlag(&o.TopK, "override-top-k", "top_k of every record, replacing its own")
	floatFlag(&o.MinP, "override-min-p", "min_p of every record, replacing its own")
	fs.Func("override-seed", "sampling_seed of every record, replacing its own", func(v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		o.Seed = &n
		return err
	})
}

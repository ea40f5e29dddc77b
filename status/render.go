package status

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// Render writes r as text: one table of stages (offsets, lag, rates, ETA, members), the generate endpoints,
// the instances, the rejections and the warnings.
func Render(w io.Writer, r *Report) error {
	var b strings.Builder
	ns := r.Namespace
	if ns == "" {
		ns = "-"
	}
	fmt.Fprintf(&b, "draftflow status  %s  namespace %s\n\n", r.Time.Format("2006-01-02 15:04:05 MST"), ns)
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STAGE\tGROUP\tTOPIC\tCOMMITTED\tEND\tLAG\tREC/S\tTOK/S\tETA\tMEMBERS")
	for _, s := range r.Stages {
		group, topic := s.Group, s.Topic
		committed, end, lag := fmt.Sprint(s.Committed), fmt.Sprint(s.End), fmt.Sprint(s.Lag)
		if group == "" {
			group, topic, committed, end, lag = "-", "-", "-", "-", "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Stage, group, topic, committed, end, lag,
			rate(s.RecordsPerSecond), rate(s.TokensPerSecond), eta(s), members(s))
	}
	tw.Flush()

	var eps []string
	for _, s := range r.Stages {
		for _, e := range s.Endpoints {
			up := "down"
			if e.Up {
				up = "up"
			}
			kv := "-"
			if e.KVUsage > 0 || e.KVPoolTokens > 0 {
				kv = fmt.Sprintf("%.0f%%", 100*e.KVUsage)
			}
			eps = append(eps, fmt.Sprintf("%s\t%s\t%s\t%d\t%.0f\t%.0f\t%s\t%s\t%d\t%d\n", e.Name, e.Instance, up, e.InFlight,
				e.InFlightTokens, e.Budget, kv, rate(e.OutputTokensPerSecond), e.Retractions, e.Requests))
		}
	}
	if len(eps) > 0 {
		b.WriteString("\n")
		tw = tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ENDPOINT\tINSTANCE\tSTATE\tIN-FLIGHT\tIN-FLIGHT TOK\tBUDGET\tKV USE\tOUT TOK/S\tRETRACTIONS\tREQUESTS")
		for _, l := range eps {
			io.WriteString(tw, l)
		}
		tw.Flush()
	}

	var ins []string
	for _, s := range r.Stages {
		for _, in := range s.Instances {
			ins = append(ins, fmt.Sprintf("%s\t%s\t%s\t%s\t%s ago\t%d\t%d\t%s\t%s\n", s.Stage, in.Instance, orDash(in.Host), in.State,
				(time.Duration(in.AgeSeconds)*time.Second).String(), in.Records, in.Tokens, rate(in.RecordsPerSecond), rate(in.TokensPerSecond)))
		}
	}
	if len(ins) > 0 {
		b.WriteString("\n")
		tw = tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "STAGE\tINSTANCE\tHOST\tSTATE\tLAST SEEN\tRECORDS\tTOKENS\tREC/S\tTOK/S")
		for _, l := range ins {
			io.WriteString(tw, l)
		}
		tw.Flush()
	}

	fmt.Fprintf(&b, "\nrejected: %d\n", r.RejectedTotal)
	if len(r.Rejections) > 0 {
		tw = tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
		for _, rc := range r.Rejections {
			fmt.Fprintf(tw, "  %s\t%s\t%d\t%s\n", rc.Stage, rc.Reason, rc.Count, clip(rc.Example, 80))
		}
		tw.Flush()
	}
	if len(r.Warnings) > 0 {
		b.WriteString("\nwarnings:\n")
		for _, wn := range r.Warnings {
			fmt.Fprintf(&b, "  ! %s\n", wn)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func rate(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v < 10:
		return fmt.Sprintf("%.2f", v)
	case v < 1e4:
		return fmt.Sprintf("%.0f", v)
	case v < 1e7:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.1fM", v/1e6)
}

func eta(s StageReport) string {
	switch {
	case s.Group == "":
		return "-"
	case s.ETASeconds == nil:
		return "?"
	case *s.ETASeconds == 0:
		return "done"
	}
	return (time.Duration(*s.ETASeconds) * time.Second).String()
}

func members(s StageReport) string {
	if s.Group == "" {
		return "-"
	}
	if len(s.Members) == 0 {
		return "0"
	}
	var ids []string
	for _, m := range s.Members {
		ids = append(ids, m.ClientID+"@"+m.Host)
	}
	return fmt.Sprintf("%d (%s)", len(s.Members), clip(strings.Join(ids, ", "), 60))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}

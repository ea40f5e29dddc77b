package generate

import (
	"bufio"
	"fmt"
	"html"
	"io"
	"math"
	"slices"
	"strings"
)

// plotColors are the series colours, one per policy in Policies() order.
var plotColors = []string{"#d62728", "#ff7f0e", "#1f77b4", "#2ca02c", "#9467bd", "#8c564b"}

// WritePlot writes an SVG figure of the results' time series: one row per scenario, with output tok/s on the
// left and KV usage on the right, over simulated minutes, one line per policy. (The oracle's line is its best
// sweep point's; on the fleet, the per-server oracles' lines summed.)
//
// The figure is plain SVG written directly: a plotting library would pull a large dependency tree into the
// module for two line charts.
func WritePlot(w io.Writer, results []BenchResult) error {
	var scen []string
	for _, r := range results {
		if !slices.Contains(scen, r.Scenario) {
			scen = append(scen, r.Scenario)
		}
	}
	const (
		panelW, panelH = 460.0, 220.0
		left, top      = 60.0, 40.0
		gapX, gapY     = 90.0, 70.0
		legendW        = 150.0
	)
	width := left + 2*panelW + gapX + legendW
	height := top + float64(len(scen))*(panelH+gapY)
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="12">`+"\n", width, height)
	fmt.Fprintf(bw, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	for row, sc := range scen {
		var rs []BenchResult
		for _, r := range results {
			if r.Scenario == sc && len(r.Series) > 0 {
				rs = append(rs, r)
			}
		}
		y0 := top + float64(row)*(panelH+gapY)
		for col, metric := range []string{"output tok/s", "KV usage"} {
			x0 := left + float64(col)*(panelW+gapX)
			maxT, maxV := 1.0, 1.0
			for _, r := range rs {
				for _, s := range r.Series {
					maxT = max(maxT, s.T/60)
					if col == 0 {
						maxV = max(maxV, s.TokPerS)
					}
				}
			}
			maxV = niceCeil(maxV)
			fmt.Fprintf(bw, `<text x="%.1f" y="%.1f" font-weight="bold">%s: %s</text>`+"\n", x0, y0-10, html.EscapeString(sc), metric)
			fmt.Fprintf(bw, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#888"/>`+"\n", x0, y0, panelW, panelH)
			for i := 0; i <= 4; i++ {
				v := maxV * float64(i) / 4
				y := y0 + panelH - panelH*float64(i)/4
				fmt.Fprintf(bw, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#eee"/>`, x0, x0+panelW, y, y)
				fmt.Fprintf(bw, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", x0-4, y+4, tick(v))
				t := maxT * float64(i) / 4
				x := x0 + panelW*float64(i)/4
				fmt.Fprintf(bw, `<text x="%.1f" y="%.1f" text-anchor="middle">%.0f</text>`+"\n", x, y0+panelH+15, t)
			}
			fmt.Fprintf(bw, `<text x="%.1f" y="%.1f" text-anchor="middle">simulated minutes</text>`+"\n", x0+panelW/2, y0+panelH+32)
			for _, r := range rs {
				var pts strings.Builder
				for _, s := range r.Series {
					v := s.KVUsage
					if col == 0 {
						v = s.TokPerS
					}
					fmt.Fprintf(&pts, "%.1f,%.1f ", x0+panelW*(s.T/60)/maxT, y0+panelH-panelH*min(v/maxV, 1))
				}
				fmt.Fprintf(bw, `<polyline fill="none" stroke="%s" stroke-width="1.3" points="%s"/>`+"\n", policyColor(r.Policy), pts.String())
			}
		}
		lx := left + 2*panelW + gapX + 15
		for i, r := range rs {
			y := y0 + 15 + float64(i)*18
			fmt.Fprintf(bw, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="%s" stroke-width="3"/>`, lx, lx+20, y-4, y-4, policyColor(r.Policy))
			fmt.Fprintf(bw, `<text x="%.1f" y="%.1f">%s</text>`+"\n", lx+26, y, html.EscapeString(r.Policy))
		}
	}
	fmt.Fprintln(bw, "</svg>")
	return bw.Flush()
}

func policyColor(p string) string {
	policies := Policies()
	i := slices.Index(policies, p)
	if i < 0 {
		i = len(policies)
	}
	return plotColors[i%len(plotColors)]
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func tick(v float64) string {
	if v < 10 {
		return fmt.Sprintf("%.2g", v)
	}
	return fmt.Sprintf("%.0f", v)
}

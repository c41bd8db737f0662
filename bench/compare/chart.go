package main

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"os"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// Colours of the systems, in table order.
var palette = map[string]color.RGBA{
	"ceiling":          {0xb0, 0xb0, 0xb0, 0xff},
	"envoy":            {0xe4, 0x57, 0x2e, 0xff},
	"gubernator":       {0xf3, 0xa7, 0x12, 0xff},
	"velvetrope-async": {0x29, 0x33, 0x5c, 0xff},
	"velvetrope-sync":  {0x66, 0x9b, 0xbc, 0xff},
}

// writeChart draws one panel per connection count: a group of bars per
// key spread, one bar per system (requests/s), its p99 written above it.
func writeChart(path string, r report) error {
	systems, conns, keys := r.axes()
	const (
		panelW, panelH = 620, 420
		margin         = 50
	)
	w, h := max(panelW*len(conns)+margin, 1100), panelH+120
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	draw.Draw(img, img.Bounds(), image.NewUniform(color.White), image.Point{}, draw.Src)
	ink := color.RGBA{0x22, 0x22, 0x22, 0xff}
	grid := color.RGBA{0xe6, 0xe6, 0xe6, 0xff}

	var top float64
	for _, x := range r.Rows {
		top = max(top, x.Result.PerSecond)
	}
	top = niceCeil(top)
	text(img, margin, 22, ink, fmt.Sprintf("requests/s per system (p99 above each bar), %d callers, %s, commit %s",
		r.Callers, r.Started.UTC().Format("2006-01-02"), r.Commit))
	for p, c := range conns {
		x0, y0 := margin+p*panelW, 60
		plotH := panelH - 80
		text(img, x0+10, y0, ink, fmt.Sprintf("%d connection(s)", c))
		base := y0 + 20 + plotH
		for i := 0; i <= 4; i++ { // grid lines and their values
			y := base - plotH*i/4
			hline(img, x0+50, x0+panelW-20, y, grid)
			text(img, x0, y+4, ink, short(top*float64(i)/4))
		}
		groupW := (panelW - 80) / max(len(keys), 1)
		barW := (groupW - 20) / max(len(systems), 1)
		for g, k := range keys {
			gx := x0 + 60 + g*groupW
			for s, sys := range systems {
				x := r.find(sys, c, k)
				if x == nil {
					continue
				}
				bh := int(float64(plotH) * x.Result.PerSecond / top)
				bx := gx + s*barW
				fill(img, image.Rect(bx+1, base-bh, bx+barW-1, base), palette[sys])
				text(img, bx, base-bh-4, ink, fmt.Sprintf("%.0f", float64(x.Result.P99)/1e6))
			}
			text(img, gx+groupW/2-40, base+16, ink, fmt.Sprintf("%s key(s)", thousands(k)))
		}
		hline(img, x0+50, x0+panelW-20, base, ink)
	}
	// legend
	lx, ly := margin, h-40
	for _, sys := range systems {
		fill(img, image.Rect(lx, ly-10, lx+12, ly+2), palette[sys])
		text(img, lx+16, ly, ink, plain(label(sys)))
		lx += 8*len(plain(label(sys))) + 40
	}
	text(img, margin, h-14, ink, "numbers above the bars: p99 in ms; the load generator shares the cores with the servers, Redis and Kafka")
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// plain drops markdown backquotes from a label.
func plain(s string) string {
	out := make([]rune, 0, len(s))
	for _, c := range s {
		if c != '`' {
			out = append(out, c)
		}
	}
	return string(out)
}

func text(img *image.RGBA, x, y int, c color.Color, s string) {
	d := font.Drawer{Dst: img, Src: image.NewUniform(c), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

func fill(img *image.RGBA, r image.Rectangle, c color.Color) {
	draw.Draw(img, r, image.NewUniform(c), image.Point{}, draw.Src)
}

func hline(img *image.RGBA, x0, x1, y int, c color.Color) {
	for x := x0; x <= x1; x++ {
		img.Set(x, y, c)
	}
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := 1.0
	for p*10 <= v {
		p *= 10
	}
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

// short writes 45000 as 45k and 12500 as 12.5k.
func short(v float64) string {
	switch {
	case v >= 1000 && int64(v)%1000 == 0:
		return fmt.Sprintf("%.0fk", v/1000)
	case v >= 1000:
		return fmt.Sprintf("%.1fk", v/1000)
	}
	return fmt.Sprintf("%.0f", v)
}

//! A hand-written SVG of the gap sweep: p50 latency and CPU per token against the gap, both arms.

use super::gap::GapRow;

const W: f64 = 420.0;
const H: f64 = 300.0;
const PAD: f64 = 50.0;

fn panel(x0: f64, title: &str, rows: &[GapRow], gaps: &[u64], val: fn(&GapRow) -> f64) -> String {
    let ymax = rows
        .iter()
        .map(val)
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max)
        .max(1e-9)
        * 1.1;
    let xs = |i: usize| x0 + PAD + (W - 2.0 * PAD) * i as f64 / (gaps.len().max(2) - 1) as f64;
    let ys = |v: f64| H - PAD - (H - 2.0 * PAD) * v / ymax;
    let mut s = format!(
        "<text x='{}' y='20' font-size='14' text-anchor='middle'>{title}</text>\
         <line x1='{}' y1='{}' x2='{}' y2='{}' stroke='black'/><line x1='{}' y1='{}' x2='{}' y2='{}' stroke='black'/>",
        x0 + W / 2.0,
        x0 + PAD,
        H - PAD,
        x0 + W - PAD,
        H - PAD,
        x0 + PAD,
        PAD,
        x0 + PAD,
        H - PAD
    );
    for (i, g) in gaps.iter().enumerate() {
        s += &format!(
            "<text x='{}' y='{}' font-size='10' text-anchor='middle'>{g}</text>",
            xs(i),
            H - PAD + 14.0
        );
    }
    s += &format!(
        "<text x='{}' y='{}' font-size='10' text-anchor='middle'>gap (us)</text>",
        x0 + W / 2.0,
        H - 12.0
    );
    for k in 0..=4 {
        let v = ymax * k as f64 / 4.0;
        s += &format!(
            "<text x='{}' y='{}' font-size='10' text-anchor='end'>{v:.3}</text>",
            x0 + PAD - 4.0,
            ys(v) + 3.0
        );
    }
    for (arm, color) in [("ort", "#d62728"), ("rcpu", "#1f77b4")] {
        let pts: Vec<String> = gaps
            .iter()
            .enumerate()
            .filter_map(|(i, g)| {
                rows.iter()
                    .find(|r| r.arm == arm && r.gap_us == *g)
                    .map(|r| (i, val(r)))
            })
            .filter(|(_, v)| v.is_finite())
            .map(|(i, v)| format!("{:.1},{:.1}", xs(i), ys(v)))
            .collect();
        s += &format!(
            "<polyline fill='none' stroke='{color}' stroke-width='2' points='{}'/>",
            pts.join(" ")
        );
        for p in &pts {
            let (x, y) = p.split_once(',').unwrap_or(("0", "0"));
            s += &format!("<circle cx='{x}' cy='{y}' r='3' fill='{color}'/>");
        }
    }
    s
}

/// The whole document.
pub fn gap_plot(label: &str, rows: &[GapRow]) -> String {
    let mut gaps: Vec<u64> = rows.iter().map(|r| r.gap_us).collect();
    gaps.sort_unstable();
    gaps.dedup();
    format!(
        "<svg xmlns='http://www.w3.org/2000/svg' width='{}' height='{}' font-family='sans-serif'>\
         <rect width='100%' height='100%' fill='white'/>{}{}\
         <text x='{}' y='{}' font-size='11' text-anchor='middle'>{} | red: ORT CPU EP, blue: rcpu</text></svg>\n",
        2.0 * W,
        H + 20.0,
        panel(0.0, "p50 latency (us)", rows, &gaps, |r| r.p50_us),
        panel(W, "CPU ms per token", rows, &gaps, |r| r.cpu_ms_per_token),
        W,
        H + 12.0,
        label.replace('<', "&lt;")
    )
}

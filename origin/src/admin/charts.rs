//! Charts drawn on the server as SVG (bars, axes, labels; colours from the
//! stylesheet, so light and dark mode both read), each with the same data
//! as a table (accessibility) and as CSV.

use super::html::{esc, num};
use std::fmt::Write;

/// One series of bars.
pub struct Series {
    pub name: &'static str,
    /// CSS class (`human`, `bot`, `count`).
    pub class: &'static str,
    pub values: Vec<u64>,
}

/// A bar chart: series stacked per label.
pub struct Chart {
    /// Element id and CSV file name.
    pub id: &'static str,
    pub title: String,
    pub labels: Vec<String>,
    pub series: Vec<Series>,
    /// Where the CSV of this chart is downloaded.
    pub csv_href: String,
}

const W: f64 = 720.0;
const H: f64 = 220.0;
const LEFT: f64 = 56.0;
const BOTTOM: f64 = 36.0;
const TOP: f64 = 10.0;

/// A round axis maximum at or above `max` (at least 4: five whole ticks).
fn nice_max(max: u64) -> u64 {
    if max <= 4 {
        return 4;
    }
    let mag = 10u64.pow(max.ilog10());
    for m in [1, 2, 5, 10] {
        if mag * m >= max {
            return mag * m;
        }
    }
    mag * 10
}

impl Chart {
    fn total(&self, i: usize) -> u64 {
        self.series
            .iter()
            .map(|s| s.values.get(i).copied().unwrap_or(0))
            .sum()
    }

    /// The SVG.
    pub fn svg(&self) -> String {
        let n = self.labels.len().max(1);
        let top = nice_max((0..n).map(|i| self.total(i)).max().unwrap_or(0));
        let plot_w = W - LEFT - 8.0;
        let plot_h = H - TOP - BOTTOM;
        let step = plot_w / n as f64;
        let bar = (step * 0.8).max(1.0);
        let mut s = format!(
            "<svg class=\"chart\" viewBox=\"0 0 {W} {H}\" role=\"img\" aria-labelledby=\"{id}-t\">\
             <title id=\"{id}-t\">{t}</title>",
            id = self.id,
            t = esc(&self.title)
        );
        for k in 0..=4u64 {
            let v = top * k / 4;
            let y = TOP + plot_h - plot_h * k as f64 / 4.0;
            let _ = write!(
                s,
                "<line class=\"axis\" x1=\"{LEFT}\" x2=\"{x2}\" y1=\"{y:.1}\" y2=\"{y:.1}\"/>\
                 <text x=\"{tx}\" y=\"{ty:.1}\" text-anchor=\"end\">{v}</text>",
                x2 = W - 8.0,
                tx = LEFT - 4.0,
                ty = y + 3.0,
                v = num(v)
            );
        }
        let every = n.div_ceil(8).max(1);
        for i in 0..self.labels.len() {
            let x = LEFT + step * i as f64 + (step - bar) / 2.0;
            let mut base = 0u64;
            for se in &self.series {
                let v = se.values.get(i).copied().unwrap_or(0);
                if v > 0 {
                    let y0 = TOP + plot_h - plot_h * (base + v) as f64 / top as f64;
                    let h = plot_h * v as f64 / top as f64;
                    let _ = write!(
                        s,
                        "<rect class=\"{c}\" x=\"{x:.1}\" y=\"{y0:.1}\" width=\"{bar:.1}\" height=\"{h:.1}\">\
                         <title>{l}: {v} {name}</title></rect>",
                        c = se.class,
                        l = esc(&self.labels[i]),
                        name = se.name,
                    );
                }
                base += v;
            }
            if i % every == 0 {
                let _ = write!(
                    s,
                    "<text x=\"{tx:.1}\" y=\"{ty}\" text-anchor=\"middle\">{l}</text>",
                    tx = x + bar / 2.0,
                    ty = H - BOTTOM + 14.0,
                    l = esc(&self.labels[i])
                );
            }
        }
        s.push_str("</svg>");
        s
    }

    /// The legend, the SVG, the table (folded) and the CSV link.
    pub fn html(&self) -> String {
        let legend: String = self
            .series
            .iter()
            .map(|se| {
                format!(
                    "<span><i class=\"sw {}\"></i>{}</span>",
                    se.class,
                    esc(se.name)
                )
            })
            .collect();
        let head: String = self
            .series
            .iter()
            .map(|se| format!("<th class=\"n\">{}</th>", esc(se.name)))
            .collect();
        let mut rows = String::new();
        for (i, l) in self.labels.iter().enumerate() {
            let _ = write!(rows, "<tr><td>{}</td>", esc(l));
            for se in &self.series {
                let _ = write!(
                    rows,
                    "<td class=\"n\">{}</td>",
                    se.values.get(i).copied().unwrap_or(0)
                );
            }
            rows.push_str("</tr>");
        }
        format!(
            "<figure id=\"{id}\"><figcaption>{t}</figcaption><div class=\"legend\">{legend}</div>{svg}\
             <details><summary>Table</summary><table><thead><tr><th>when</th>{head}</tr></thead>\
             <tbody>{rows}</tbody></table></details>\
             <a class=\"csv\" href=\"{csv}\">Download CSV</a></figure>",
            id = self.id,
            t = esc(&self.title),
            svg = self.svg(),
            csv = esc(&self.csv_href),
        )
    }

    /// The CSV: a header row, then one row per label.
    pub fn csv(&self) -> String {
        let mut s = String::from("when");
        for se in &self.series {
            s.push(',');
            s.push_str(se.name);
        }
        s.push('\n');
        for (i, l) in self.labels.iter().enumerate() {
            s.push_str(l);
            for se in &self.series {
                let _ = write!(s, ",{}", se.values.get(i).copied().unwrap_or(0));
            }
            s.push('\n');
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart() -> Chart {
        Chart {
            id: "c",
            title: "Clicks <per day>".into(),
            labels: vec!["d1".into(), "d2".into()],
            series: vec![
                Series {
                    name: "human",
                    class: "human",
                    values: vec![3, 0],
                },
                Series {
                    name: "bot",
                    class: "bot",
                    values: vec![1, 2],
                },
            ],
            csv_href: "/admin/?chart=c&format=csv".into(),
        }
    }

    #[test]
    fn csv_table_and_svg_hold_the_same_numbers() {
        let c = chart();
        assert_eq!(c.csv(), "when,human,bot\nd1,3,1\nd2,0,2\n");
        let h = c.html();
        assert!(
            h.contains("<td>d1</td><td class=\"n\">3</td><td class=\"n\">1</td>"),
            "{h}"
        );
        assert!(h.contains("Clicks &lt;per day&gt;") && !h.contains("<per day>"));
        // Three bars (no bar for a zero).
        assert_eq!(c.svg().matches("<rect").count(), 3);
        assert_eq!(nice_max(0), 4);
        assert_eq!(nice_max(3), 4);
        assert_eq!(nice_max(7), 10);
        assert_eq!(nice_max(11), 20);
        assert_eq!(nice_max(4999), 5000);
    }
}

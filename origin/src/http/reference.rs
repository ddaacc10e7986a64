//! The browsable API reference at `/api/docs` (issue 28): `docs/openapi.yaml`
//! (the contract compiled into the binary, [`super::openapi`]) rendered once
//! at start into one HTML page — every operation by tag with its scopes,
//! parameters, body and answers (the error kinds each can carry), then the
//! schemas. Server-side, no script, the console's stylesheet and CSP: no
//! CDN and nothing a browser must run, so it works offline and behind the
//! same policy as the console.

use crate::admin::html::{esc, page_response};
use axum::response::Response;
use bytes::Bytes;
use http::StatusCode;
use serde_json::Value;
use std::fmt::Write;

/// The methods an operation may have, in the order the page lists them.
const METHODS: [&str; 5] = ["get", "post", "put", "patch", "delete"];

/// The page for `contract` (an OpenAPI 3.1 document as JSON).
pub fn render(contract: &Value, stylesheet: &str) -> String {
    let info = &contract["info"];
    let title = format!(
        "{} API reference (version {})",
        text(&info["title"]),
        text(&info["version"])
    );
    let mut main = String::new();
    let _ = write!(
        main,
        "<p><strong>{}</strong> The machine-readable contract: \
         <a href=\"/api/v1/openapi.json\">/api/v1/openapi.json</a>.</p>{}",
        esc(&text(&info["summary"])),
        markdown(&text(&info["description"]))
    );
    let ops = operations(contract);
    // Each tag with its operations, tags without any left out.
    let groups: Vec<((String, String), Vec<&Operation>)> = tags(contract)
        .into_iter()
        .map(|tag| {
            let mine = ops.iter().filter(|o| o.tag == tag.0).collect();
            (tag, mine)
        })
        .filter(|(_, mine): &(_, Vec<_>)| !mine.is_empty())
        .collect();
    main.push_str("<nav class=\"toc\" aria-label=\"Operations\">");
    for ((name, _), mine) in &groups {
        let _ = write!(
            main,
            "<h2><a href=\"#tag-{id}\">{name}</a></h2><ul>",
            id = anchor(name),
            name = esc(name)
        );
        for o in mine {
            let _ = write!(
                main,
                "<li><a href=\"#op-{id}\"><code>{m} {p}</code></a> {s}</li>",
                id = anchor(&o.id),
                m = o.method.to_uppercase(),
                p = esc(&o.path),
                s = esc(&text(&o.op["summary"]))
            );
        }
        main.push_str("</ul>");
    }
    main.push_str("<h2><a href=\"#schemas\">Schemas</a></h2></nav>");
    for ((name, description), mine) in &groups {
        let _ = write!(
            main,
            "<section id=\"tag-{}\"><h2>{}</h2>{}",
            anchor(name),
            esc(name),
            markdown(description)
        );
        for o in mine {
            operation(&mut main, contract, o);
        }
        main.push_str("</section>");
    }
    schemas(&mut main, contract);
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{t}</title><link rel=\"stylesheet\" href=\"{css}\"></head>\
         <body class=\"reference\"><header><nav><a href=\"/admin/\">Console</a>\
         <a href=\"/api/docs\" aria-current=\"page\">API reference</a></nav></header>\
         <main><h1>{t}</h1>{main}</main></body></html>\n",
        t = esc(&title),
        css = esc(stylesheet),
    )
}

/// The answer of `GET /api/docs` (public, like the contract itself).
pub fn response(page: &Bytes) -> Response {
    page_response(StatusCode::OK, page.clone(), "public, max-age=300")
}

/// One operation of the contract, with where it is.
struct Operation<'a> {
    path: String,
    method: &'static str,
    id: String,
    tag: String,
    op: &'a Value,
    /// Parameters declared on the path, for every method.
    shared: &'a Value,
}

/// The contract's tags (name, description) in their declared order, then
/// any an operation names without declaring.
fn tags(contract: &Value) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = contract["tags"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| (text(&t["name"]), text(&t["description"])))
        .collect();
    for o in operations(contract) {
        if !out.iter().any(|(n, _)| *n == o.tag) {
            out.push((o.tag, String::new()));
        }
    }
    out
}

fn operations(contract: &Value) -> Vec<Operation<'_>> {
    let mut out = Vec::new();
    let Some(paths) = contract["paths"].as_object() else {
        return out;
    };
    for (path, item) in paths {
        for method in METHODS {
            let op = &item[method];
            if !op.is_object() {
                continue;
            }
            let id = match op["operationId"].as_str() {
                Some(id) => id.to_owned(),
                None => format!("{method}-{path}"),
            };
            out.push(Operation {
                path: path.clone(),
                method,
                id,
                tag: op["tags"][0].as_str().unwrap_or("other").to_owned(),
                op,
                shared: &item["parameters"],
            });
        }
    }
    out
}

fn operation(out: &mut String, contract: &Value, o: &Operation<'_>) {
    let op = o.op;
    let _ = write!(
        out,
        "<article id=\"op-{id}\" class=\"panel\"><h3><code>{m} {p}</code> {s}</h3>{d}",
        id = anchor(&o.id),
        m = o.method.to_uppercase(),
        p = esc(&o.path),
        s = esc(&text(&op["summary"])),
        d = markdown(&text(&op["description"]))
    );
    let public = op["security"].as_array().is_some_and(Vec::is_empty);
    let scopes: Vec<String> = op["x-scopes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| format!("<code>{}</code>", esc(&text(s))))
        .collect();
    let auth = if public {
        "none".to_owned()
    } else if scopes.is_empty() {
        "an API key (<code>Authorization: Bearer</code>)".to_owned()
    } else {
        format!(
            "an API key (<code>Authorization: Bearer</code>) with {}",
            scopes.join(" or ")
        )
    };
    let _ = write!(
        out,
        "<p>Operation <code>{}</code>; authentication: {auth}.</p>",
        esc(&o.id)
    );
    let params: Vec<&Value> = o
        .shared
        .as_array()
        .into_iter()
        .flatten()
        .chain(op["parameters"].as_array().into_iter().flatten())
        .map(|p| resolve(contract, p))
        .collect();
    if !params.is_empty() {
        out.push_str(
            "<table><caption>Parameters</caption><tr><th>name</th><th>in</th>\
             <th>required</th><th>type</th><th>description</th></tr>",
        );
        for p in params {
            let _ = write!(
                out,
                "<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&text(&p["name"])),
                esc(&text(&p["in"])),
                if p["required"].as_bool() == Some(true) {
                    "yes"
                } else {
                    "no"
                },
                schema_type(&p["schema"]),
                markdown(&text(&p["description"]))
            );
        }
        out.push_str("</table>");
    }
    let body = resolve(contract, &op["requestBody"]);
    if let Some(content) = body["content"].as_object() {
        for (media, c) in content {
            let _ = write!(
                out,
                "<p>Body{} (<code>{}</code>): {}</p>{}",
                if body["required"].as_bool() == Some(true) {
                    ""
                } else {
                    ", optional"
                },
                esc(media),
                schema_type(&c["schema"]),
                markdown(&text(&body["description"]))
            );
        }
    }
    if let Some(responses) = op["responses"].as_object() {
        out.push_str(
            "<table><caption>Answers</caption><tr><th>status</th><th>description</th>\
             <th>body</th></tr>",
        );
        for (status, r) in responses {
            let r = resolve(contract, r);
            let bodies: Vec<String> = r["content"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(media, c)| {
                    let kinds = error_kinds(contract, &c["schema"]);
                    format!(
                        "<code>{}</code> {}{}",
                        esc(media),
                        schema_type(&c["schema"]),
                        if kinds.is_empty() {
                            String::new()
                        } else {
                            format!("<br>error: {}", kinds.join(", "))
                        }
                    )
                })
                .collect();
            let _ = write!(
                out,
                "<tr><td><code>{}</code></td><td>{}</td><td>{}</td></tr>",
                esc(status),
                markdown(&text(&r["description"])),
                bodies.join("<br>")
            );
        }
        out.push_str("</table>");
    }
    out.push_str("</article>");
}

fn schemas(out: &mut String, contract: &Value) {
    out.push_str("<section id=\"schemas\"><h2>Schemas</h2>");
    for (name, s) in contract["components"]["schemas"]
        .as_object()
        .into_iter()
        .flatten()
    {
        let _ = write!(
            out,
            "<article id=\"schema-{}\" class=\"panel\"><h3>{}</h3>{}<p>{}</p>",
            anchor(name),
            esc(name),
            markdown(&text(&s["description"])),
            schema_type(s)
        );
        properties(out, s);
        out.push_str("</article>");
    }
    out.push_str("</section>");
}

/// The property table of an object schema (and of the objects it is
/// composed of with `allOf`).
fn properties(out: &mut String, s: &Value) {
    let required: Vec<&str> = s["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    if let Some(props) = s["properties"].as_object() {
        out.push_str(
            "<table><tr><th>field</th><th>type</th><th>required</th><th>description</th></tr>",
        );
        for (name, p) in props {
            let _ = write!(
                out,
                "<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(name),
                schema_type(p),
                if required.contains(&name.as_str()) {
                    "yes"
                } else {
                    "no"
                },
                markdown(&text(&p["description"]))
            );
        }
        out.push_str("</table>");
    }
    for part in s["allOf"].as_array().into_iter().flatten() {
        properties(out, part);
    }
}

/// A schema in a few words: a link for a `$ref`, the type, its values.
fn schema_type(s: &Value) -> String {
    if let Some(r) = s["$ref"].as_str() {
        let name = r.rsplit('/').next().unwrap_or(r);
        return format!("<a href=\"#schema-{}\">{}</a>", anchor(name), esc(name));
    }
    if let Some(c) = s.get("const") {
        return format!("<code>{}</code>", esc(&c.to_string()));
    }
    if let Some(e) = s["enum"].as_array() {
        let v: Vec<String> = e
            .iter()
            .map(|v| format!("<code>{}</code>", esc(&v.to_string())))
            .collect();
        return format!("one of {}", v.join(", "));
    }
    for (key, word) in [("oneOf", " or "), ("anyOf", " or "), ("allOf", " and ")] {
        if let Some(parts) = s[key].as_array() {
            let v: Vec<String> = parts.iter().map(schema_type).collect();
            return v.join(word);
        }
    }
    let types: Vec<String> = match &s["type"] {
        Value::String(t) => vec![t.clone()],
        Value::Array(ts) => ts.iter().map(text).collect(),
        _ => Vec::new(),
    };
    let mut out: Vec<String> = types
        .iter()
        .map(|t| match t.as_str() {
            "array" => format!("array of {}", schema_type(&s["items"])),
            t => esc(t),
        })
        .collect();
    if out.is_empty() {
        out.push("any".into());
    }
    let mut words = out.join(" or ");
    if let Some(f) = s["format"].as_str() {
        let _ = write!(words, " ({})", esc(f));
    }
    words
}

/// The error kinds an answer's schema names (`properties.error`'s `enum`
/// or `const`, directly or through a `$ref`).
fn error_kinds(contract: &Value, s: &Value) -> Vec<String> {
    let s = resolve(contract, s);
    let e = &s["properties"]["error"];
    let kinds: Vec<&Value> = match (e["enum"].as_array(), e.get("const")) {
        (Some(v), _) => v.iter().collect(),
        (None, Some(c)) => vec![c],
        _ => Vec::new(),
    };
    kinds
        .into_iter()
        .map(|k| format!("<code>{}</code>", esc(&text(k))))
        .collect()
}

/// `v`, or what its local `$ref` points at (one level: the contract's
/// components do not chain references).
fn resolve<'a>(contract: &'a Value, v: &'a Value) -> &'a Value {
    match v["$ref"].as_str().and_then(|r| r.strip_prefix('#')) {
        Some(pointer) => contract.pointer(pointer).unwrap_or(v),
        None => v,
    }
}

/// A string value, or a scalar's JSON text; empty for anything else.
fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(_) | Value::Bool(_) => v.to_string(),
        _ => String::new(),
    }
}

/// An `id` fragment: letters, digits, `-` and `_` kept, the rest `-`.
fn anchor(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect()
}

/// The contract's prose, which is Markdown of a small kind: paragraphs,
/// `* ` / `- ` lists, `` `code` `` and `**bold**`. Escaped first, so nothing
/// in it can become markup but those.
fn markdown(src: &str) -> String {
    let mut out = String::new();
    for block in src.split("\n\n").map(str::trim).filter(|b| !b.is_empty()) {
        let lines: Vec<&str> = block.lines().map(str::trim).collect();
        if lines
            .iter()
            .all(|l| l.starts_with("* ") || l.starts_with("- "))
        {
            out.push_str("<ul>");
            for l in lines {
                let _ = write!(out, "<li>{}</li>", inline(&l[2..]));
            }
            out.push_str("</ul>");
        } else {
            let _ = write!(out, "<p>{}</p>", inline(&lines.join(" ")));
        }
    }
    out
}

/// `` `code` `` and `**bold**` of one escaped line; an unpaired marker
/// stays as it is.
fn inline(line: &str) -> String {
    let escaped = esc(line);
    let coded = pairs(&escaped, "`", "<code>", "</code>");
    pairs(&coded, "**", "<strong>", "</strong>")
}

/// `s` with each pair of `mark` replaced by `open` … `close`.
fn pairs(s: &str, mark: &str, open: &str, close: &str) -> String {
    let parts: Vec<&str> = s.split(mark).collect();
    if parts.len() < 3 {
        return s.to_owned();
    }
    let mut out = String::with_capacity(s.len() + 16);
    let last = parts.len() - 1;
    for (i, p) in parts.iter().enumerate() {
        out.push_str(p);
        if i == last {
            break;
        }
        // An odd number of markers leaves the last one as text.
        if i % 2 == 0 && i + 1 == last {
            out.push_str(mark);
        } else {
            out.push_str(if i % 2 == 0 { open } else { close });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_operation_and_schema_of_the_contract_has_its_anchor() {
        let v: Value = serde_yaml::from_str(super::super::openapi::YAML).unwrap();
        let page = render(&v, "/admin/assets/admin.css");
        let ops = operations(&v);
        assert!(ops.len() > 20);
        for o in &ops {
            assert!(
                page.contains(&format!("id=\"op-{}\"", anchor(&o.id))),
                "{}",
                o.id
            );
        }
        for name in v["components"]["schemas"].as_object().unwrap().keys() {
            assert!(page.contains(&format!("id=\"schema-{name}\"")), "{name}");
        }
        // Error kinds come from the answers' schemas.
        assert!(page.contains("<code>destination_blocked</code>"));
        assert!(!page.contains("<script"));
    }

    #[test]
    fn prose_is_escaped_before_its_few_marks_become_markup() {
        assert_eq!(
            markdown("A `<b>` and **strong** `x`.\n\n* one\n* `two`"),
            "<p>A <code>&lt;b&gt;</code> and <strong>strong</strong> <code>x</code>.</p>\
             <ul><li>one</li><li><code>two</code></li></ul>"
        );
        assert_eq!(inline("a ` b"), "a ` b");
        assert_eq!(inline("`a` b `c"), "<code>a</code> b `c");
        let hostile: Value = serde_json::json!({
            "info": {"title": "<script>alert(1)</script>", "version": "1"},
            "tags": [{"name": "x\"><img src=x>", "description": "d"}],
            "paths": {"/a/{b}\"": {"get": {"tags": ["x\"><img src=x>"], "operationId": "o\"><svg>",
                "summary": "<i>", "responses": {"200": {"description": "<b>"}}}}}
        });
        let page = render(&hostile, "/s.css");
        assert!(!page.contains("<script>alert"));
        assert!(!page.contains("<img"));
        assert!(!page.contains("<svg"));
        assert!(!page.contains("<i>"));
        assert!(page.contains("id=\"op-o---svg-\""));
    }
}

//! Lua values as plain data: what a legacy `config.lua` returned, detached
//! from the interpreter so mapping it needs no Lua state.

use super::LegacyError;
use mlua::Value;

/// Tables nest at most this deep (a config is a few levels).
const MAX_DEPTH: usize = 16;

/// A Lua value converted to plain data.
#[derive(Debug, Clone, PartialEq)]
pub enum Data {
    Nil,
    Bool(bool),
    Int(i64),
    Num(f64),
    Str(String),
    /// A table whose keys are exactly `1..=n`.
    List(Vec<Data>),
    /// A table with string keys, sorted by key.
    Map(Vec<(String, Data)>),
}

/// Converts `v`; `path` names it in errors (`redis.timeout`, `listen[2]`).
pub fn from_lua(v: &Value, path: &str) -> Result<Data, LegacyError> {
    convert(v, path, 0)
}

fn convert(v: &Value, path: &str, depth: usize) -> Result<Data, LegacyError> {
    if depth > MAX_DEPTH {
        return Err(LegacyError::new(format!("{path}: nested too deeply")));
    }
    Ok(match v {
        Value::Nil => Data::Nil,
        Value::Boolean(b) => Data::Bool(*b),
        Value::Integer(i) => Data::Int(*i),
        Value::Number(n) => Data::Num(*n),
        Value::String(s) => Data::Str(
            s.to_str()
                .map_err(|_| LegacyError::new(format!("{path}: not UTF-8")))?
                .to_string(),
        ),
        Value::Table(t) => {
            let len = t.raw_len();
            let mut pairs = Vec::new();
            for pair in t.clone().pairs::<Value, Value>() {
                pairs.push(pair.map_err(|e| LegacyError::new(format!("{path}: {e}")))?);
            }
            if len > 0 && pairs.len() == len {
                let mut list = Vec::with_capacity(len);
                for i in 1..=len {
                    let item: Value = t
                        .raw_get(i)
                        .map_err(|e| LegacyError::new(format!("{path}[{i}]: {e}")))?;
                    list.push(convert(&item, &format!("{path}[{i}]"), depth + 1)?);
                }
                Data::List(list)
            } else {
                let mut map = Vec::with_capacity(pairs.len());
                for (k, v) in pairs {
                    let key = match &k {
                        Value::String(s) => s
                            .to_str()
                            .map_err(|_| LegacyError::new(format!("{path}: key not UTF-8")))?
                            .to_string(),
                        other => {
                            return Err(LegacyError::new(format!(
                                "{path}: table mixes list items and keys ({} key)",
                                other.type_name()
                            )))
                        }
                    };
                    let sub = if path.is_empty() {
                        key.clone()
                    } else {
                        format!("{path}.{key}")
                    };
                    map.push((key, convert(&v, &sub, depth + 1)?));
                }
                map.sort_by(|a, b| a.0.cmp(&b.0));
                Data::Map(map)
            }
        }
        other => {
            return Err(LegacyError::new(format!(
                "{path}: unsupported {} value",
                other.type_name()
            )))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use mlua::Lua;

    fn eval(src: &str) -> Result<Data, LegacyError> {
        let lua = Lua::new();
        let v: Value = match lua.load(src).eval() {
            Ok(v) => v,
            Err(e) => panic!("{e}"),
        };
        from_lua(&v, "")
    }

    #[test]
    fn tables_become_lists_or_sorted_maps() {
        let d = eval("return { b = 1, a = { 'x', 'y' }, c = 2.5, d = true }");
        assert_eq!(
            d.ok(),
            Some(Data::Map(vec![
                (
                    "a".into(),
                    Data::List(vec![Data::Str("x".into()), Data::Str("y".into())])
                ),
                ("b".into(), Data::Int(1)),
                ("c".into(), Data::Num(2.5)),
                ("d".into(), Data::Bool(true)),
            ]))
        );
        assert_eq!(eval("return {}").ok(), Some(Data::Map(vec![])));
    }

    #[test]
    fn odd_tables_are_refused_with_their_path() {
        for (src, needle) in [
            ("return { 'a', b = 1 }", "mixes list items and keys"),
            ("return { x = { [true] = 1 } }", "x: table mixes"),
            ("return { f = function() end }", "f: unsupported function"),
            (
                "local t = {} local c = t for i = 1, 40 do c.n = {} c = c.n end return t",
                "nested too deeply",
            ),
            ("return { s = '\\xff' }", "s: not UTF-8"),
        ] {
            match eval(src) {
                Ok(d) => panic!("{src}: {d:?}"),
                Err(e) => assert!(e.to_string().contains(needle), "{src}: {e}"),
            }
        }
    }
}

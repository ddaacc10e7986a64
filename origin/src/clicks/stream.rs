//! Replies of the stream commands the consumer uses (`XREADGROUP`,
//! `XAUTOCLAIM`), read from raw [`redis::Value`]s so they work in RESP2 and
//! RESP3 alike and a surprise is an error, never a panic.

use redis::Value;

/// One stream entry: its stream id and fields (values as bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub id: String,
    pub fields: Vec<(String, Vec<u8>)>,
}

impl Entry {
    /// The value of field `name`, if present and UTF-8.
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(k, _)| k == name)
            .and_then(|(_, v)| std::str::from_utf8(v).ok())
    }
}

/// A reply that is not what the command returns.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unexpected {command} reply: {what}")]
pub struct ReplyError {
    pub command: &'static str,
    pub what: &'static str,
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        _ => None,
    }
}

fn bytes(v: &Value) -> Option<Vec<u8>> {
    match v {
        Value::BulkString(b) => Some(b.clone()),
        Value::SimpleString(s) => Some(s.clone().into_bytes()),
        Value::VerbatimString { text, .. } => Some(text.clone().into_bytes()),
        Value::Int(i) => Some(i.to_string().into_bytes()),
        _ => None,
    }
}

/// `[id, [k, v, ...]]`; an entry whose fields are nil (deleted from the
/// stream while pending) comes back with no fields.
fn entry(v: &Value, command: &'static str) -> Result<Entry, ReplyError> {
    let bad = |what| ReplyError { command, what };
    let Value::Array(parts) = v else {
        return Err(bad("entry is not an array"));
    };
    let [id, fields] = parts.as_slice() else {
        return Err(bad("entry is not [id, fields]"));
    };
    let id = text(id).ok_or_else(|| bad("entry id"))?;
    let fields = match fields {
        Value::Nil => Vec::new(),
        Value::Array(kv) if kv.len() % 2 == 0 => kv
            .chunks(2)
            .map(|p| Some((text(&p[0])?, bytes(&p[1])?)))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| bad("entry field"))?,
        Value::Map(kv) => kv
            .iter()
            .map(|(k, v)| Some((text(k)?, bytes(v)?)))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| bad("entry field"))?,
        _ => return Err(bad("entry fields")),
    };
    Ok(Entry { id, fields })
}

fn entries(v: &Value, command: &'static str) -> Result<Vec<Entry>, ReplyError> {
    match v {
        Value::Nil => Ok(Vec::new()),
        Value::Array(list) => list.iter().map(|e| entry(e, command)).collect(),
        _ => Err(ReplyError {
            command,
            what: "entries are not an array",
        }),
    }
}

/// `XREADGROUP ... STREAMS <one key> >`: nil on timeout, else the key's entries.
pub fn read_group(v: &Value) -> Result<Vec<Entry>, ReplyError> {
    const C: &str = "XREADGROUP";
    match v {
        Value::Nil => Ok(Vec::new()),
        Value::Array(streams) => {
            let mut out = Vec::new();
            for s in streams {
                match s {
                    Value::Array(kv) if kv.len() == 2 => out.extend(entries(&kv[1], C)?),
                    _ => {
                        return Err(ReplyError {
                            command: C,
                            what: "stream is not [key, entries]",
                        })
                    }
                }
            }
            Ok(out)
        }
        Value::Map(streams) => {
            let mut out = Vec::new();
            for (_, e) in streams {
                out.extend(entries(e, C)?);
            }
            Ok(out)
        }
        _ => Err(ReplyError {
            command: C,
            what: "not an array",
        }),
    }
}

/// What one `XAUTOCLAIM` call returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimed {
    /// The next cursor (`0-0` when the scan is complete).
    pub cursor: String,
    pub entries: Vec<Entry>,
    /// Pending entries the stream no longer holds (trimmed by `MAXLEN`
    /// before anyone applied them): Redis drops them from the group.
    pub deleted: usize,
}

/// `XAUTOCLAIM`: cursor, claimed entries, and (Redis 7) deleted ids.
pub fn auto_claim(v: &Value) -> Result<Claimed, ReplyError> {
    const C: &str = "XAUTOCLAIM";
    let bad = |what| ReplyError { command: C, what };
    let Value::Array(parts) = v else {
        return Err(bad("not an array"));
    };
    let (Some(cursor), Some(list)) = (parts.first(), parts.get(1)) else {
        return Err(bad("not [cursor, entries, ...]"));
    };
    let cursor = text(cursor).ok_or_else(|| bad("cursor"))?;
    let deleted = match parts.get(2) {
        Some(Value::Array(ids)) => ids.len(),
        _ => 0,
    };
    Ok(Claimed {
        cursor,
        entries: entries(list, C)?,
        deleted,
    })
}

/// `XPENDING key group` (summary form): the number of pending entries.
pub fn pending_count(v: &Value) -> Option<i64> {
    match v {
        Value::Array(parts) => match parts.first() {
            Some(Value::Int(n)) => Some(*n),
            _ => None,
        },
        _ => None,
    }
}

/// `XPENDING key group` (summary form): the id of the oldest entry read
/// and not acknowledged, if any.
pub fn oldest_pending(v: &Value) -> Option<String> {
    match v {
        Value::Array(parts) if pending_count(v).is_some_and(|n| n > 0) => {
            parts.get(1).and_then(text)
        }
        _ => None,
    }
}

/// The milliseconds of a stream id `<ms>-<seq>`.
pub fn id_ms(id: &str) -> Option<u64> {
    id.split_once('-')?.0.parse().ok()
}

/// A flat `[k, v, ...]` array (RESP2) or a map (RESP3) as pairs.
fn pairs(v: &Value) -> Option<Vec<(&Value, &Value)>> {
    match v {
        Value::Array(kv) if kv.len() % 2 == 0 => {
            Some(kv.chunks(2).map(|p| (&p[0], &p[1])).collect())
        }
        Value::Map(kv) => Some(kv.iter().map(|(k, v)| (k, v)).collect()),
        _ => None,
    }
}

fn field<'a>(pairs: &[(&'a Value, &'a Value)], name: &str) -> Option<&'a Value> {
    pairs
        .iter()
        .find(|(k, _)| text(k).as_deref() == Some(name))
        .map(|(_, v)| *v)
}

/// `XINFO GROUPS key`: the `last-delivered-id` of the group `name`
/// (`None`: no such group).
pub fn last_delivered(v: &Value, name: &str) -> Result<Option<String>, ReplyError> {
    const C: &str = "XINFO GROUPS";
    let bad = |what| ReplyError { command: C, what };
    let Value::Array(list) = v else {
        return Err(bad("reply is not an array"));
    };
    for g in list {
        let kv = pairs(g).ok_or_else(|| bad("group is not a map"))?;
        if field(&kv, "name").and_then(text).as_deref() == Some(name) {
            return field(&kv, "last-delivered-id")
                .and_then(text)
                .map(Some)
                .ok_or_else(|| bad("last-delivered-id"));
        }
    }
    Ok(None)
}

/// One consumer of the group, from `XINFO CONSUMERS`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerInfo {
    pub name: String,
    /// Entries it read and has not acknowledged.
    pub pending: i64,
    /// Milliseconds since it last read (or claimed).
    pub idle_ms: i64,
}

/// `XINFO CONSUMERS key group`: one map (RESP3) or flat `[k, v, ...]`
/// array (RESP2) per consumer.
pub fn consumers(v: &Value) -> Result<Vec<ConsumerInfo>, ReplyError> {
    const C: &str = "XINFO CONSUMERS";
    let bad = |what| ReplyError { command: C, what };
    let Value::Array(list) = v else {
        return Err(bad("reply is not an array"));
    };
    list.iter()
        .map(|c| {
            let kv = pairs(c).ok_or_else(|| bad("consumer is not a map"))?;
            let get = |name: &str| field(&kv, name);
            let int = |name: &str| match get(name) {
                Some(Value::Int(n)) => Ok(*n),
                _ => Err(bad("consumer field is not an integer")),
            };
            Ok(ConsumerInfo {
                name: get("name")
                    .and_then(text)
                    .ok_or_else(|| bad("consumer name"))?,
                pending: int("pending")?,
                idle_ms: int("idle")?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn trimming_inputs() {
        assert_eq!(id_ms("1700000000123-4"), Some(1_700_000_000_123));
        assert_eq!(id_ms("0-0"), Some(0));
        assert_eq!(id_ms("x-1"), None);
        let pending = Value::Array(vec![Value::Int(2), bulk("5-1"), bulk("9-0"), Value::Nil]);
        assert_eq!(oldest_pending(&pending).as_deref(), Some("5-1"));
        let none = Value::Array(vec![Value::Int(0), Value::Nil, Value::Nil, Value::Nil]);
        assert_eq!(oldest_pending(&none), None);
        let groups = Value::Array(vec![Value::Array(vec![
            bulk("name"),
            bulk("origins"),
            bulk("pending"),
            Value::Int(0),
            bulk("last-delivered-id"),
            bulk("42-3"),
        ])]);
        assert_eq!(last_delivered(&groups, "origins"), Ok(Some("42-3".into())));
        assert_eq!(last_delivered(&groups, "others"), Ok(None));
        assert!(last_delivered(&Value::Int(1), "origins").is_err());
    }

    #[test]
    fn parses_replies() {
        let e = Value::Array(vec![
            bulk("1-0"),
            Value::Array(vec![bulk("id"), bulk("e:n:1"), bulk("v"), bulk("1")]),
        ]);
        let r = read_group(&Value::Array(vec![Value::Array(vec![
            bulk("su:1:clicks"),
            Value::Array(vec![e.clone()]),
        ])]))
        .unwrap();
        assert_eq!(r.len(), 1);
        assert_eq!((r[0].id.as_str(), r[0].field("id")), ("1-0", Some("e:n:1")));
        assert_eq!(r[0].field("b"), None);
        assert!(read_group(&Value::Nil).unwrap().is_empty());
        let c = auto_claim(&Value::Array(vec![
            bulk("0-0"),
            Value::Array(vec![e, Value::Array(vec![bulk("2-0"), Value::Nil])]),
            Value::Array(vec![bulk("3-0")]),
        ]))
        .unwrap();
        assert_eq!(
            (c.cursor.as_str(), c.entries.len(), c.deleted),
            ("0-0", 2, 1)
        );
        assert!(c.entries[1].fields.is_empty());
        assert!(read_group(&Value::Int(3)).is_err());
        assert!(auto_claim(&Value::Array(vec![bulk("0-0")])).is_err());
        assert_eq!(
            pending_count(&Value::Array(vec![Value::Int(4), Value::Nil])),
            Some(4)
        );
    }

    #[test]
    fn parses_consumers() {
        let resp2 = Value::Array(vec![Value::Array(vec![
            bulk("name"),
            bulk("origin-1-a"),
            bulk("pending"),
            Value::Int(2),
            bulk("idle"),
            Value::Int(9000),
            bulk("inactive"),
            Value::Int(9000),
        ])]);
        let resp3 = Value::Array(vec![Value::Map(vec![
            (bulk("idle"), Value::Int(5)),
            (bulk("name"), bulk("origin-2-b")),
            (bulk("pending"), Value::Int(0)),
        ])]);
        let c = consumers(&resp2).unwrap();
        assert_eq!(
            (c[0].name.as_str(), c[0].pending, c[0].idle_ms),
            ("origin-1-a", 2, 9000)
        );
        let c = consumers(&resp3).unwrap();
        assert_eq!(
            (c[0].name.as_str(), c[0].pending, c[0].idle_ms),
            ("origin-2-b", 0, 5)
        );
        assert!(consumers(&Value::Array(vec![Value::Array(vec![bulk("name")])])).is_err());
        assert!(consumers(&Value::Int(1)).is_err());
    }
}

//! Reading one table of a legacy config: typed getters that remember which
//! keys were read, so every key ends up mapped, knowingly ignored (with a
//! note), or refused by name.

use super::value::Data;
use super::LegacyError;

/// A table being mapped.
pub struct Section<'a> {
    path: String,
    items: &'a [(String, Data)],
    used: Vec<&'a str>,
}

impl<'a> Section<'a> {
    /// `d` as a section named `path` ("" for the returned table). An empty
    /// Lua table converts to an empty list, so that is accepted too.
    pub fn new(path: &str, d: &'a Data) -> Result<Self, LegacyError> {
        let items: &'a [(String, Data)] = match d {
            Data::Map(items) => items,
            Data::List(l) if l.is_empty() => &[],
            _ => {
                let what = if path.is_empty() {
                    "the returned value"
                } else {
                    path
                };
                return Err(LegacyError::new(format!("{what} must be a table")));
            }
        };
        Ok(Section {
            path: path.to_owned(),
            items,
            used: Vec::new(),
        })
    }

    /// The full name of `key` in messages (`redis.timeout`).
    pub fn name(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_owned()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    /// The value of `key` (nil counts as absent), marking it read.
    pub fn get(&mut self, key: &'a str) -> Option<&'a Data> {
        let found = self
            .items
            .iter()
            .find(|(k, v)| k == key && *v != Data::Nil)
            .map(|(_, v)| v);
        if found.is_some() {
            self.used.push(key);
        }
        found
    }

    /// A string (a number is taken as its decimal text).
    pub fn str(&mut self, key: &'a str) -> Result<Option<String>, LegacyError> {
        match self.get(key) {
            None => Ok(None),
            Some(Data::Str(s)) => Ok(Some(s.clone())),
            Some(Data::Int(i)) => Ok(Some(i.to_string())),
            Some(_) => Err(LegacyError::new(format!(
                "{} must be a string",
                self.name(key)
            ))),
        }
    }

    /// A non-negative integer (a whole float or a numeric string too).
    pub fn uint(&mut self, key: &'a str) -> Result<Option<u64>, LegacyError> {
        match self.get(key) {
            None => Ok(None),
            Some(Data::Int(i)) if *i >= 0 => Ok(Some(*i as u64)),
            Some(Data::Num(n)) if *n >= 0.0 && n.fract() == 0.0 => Ok(Some(*n as u64)),
            Some(Data::Str(s)) if s.parse::<u64>().is_ok() => Ok(s.parse::<u64>().ok()),
            Some(_) => Err(LegacyError::new(format!(
                "{} must be a non-negative integer",
                self.name(key)
            ))),
        }
    }

    /// A non-negative integer that must fit `T` (a field of the file model).
    pub fn int<T: TryFrom<u64>>(&mut self, key: &'a str) -> Result<Option<T>, LegacyError> {
        match self.uint(key)? {
            None => Ok(None),
            Some(v) => T::try_from(v)
                .map(Some)
                .map_err(|_| LegacyError::new(format!("{} is out of range ({v})", self.name(key)))),
        }
    }

    /// The sub-table `key`, if present.
    pub fn section(&mut self, key: &'a str) -> Result<Option<Section<'a>>, LegacyError> {
        let name = self.name(key);
        self.get(key).map(|d| Section::new(&name, d)).transpose()
    }

    /// Keys known from the legacy deployment that the edge has no use for:
    /// read, and noted with `why`.
    pub fn ignore(&mut self, keys: &[&'a str], why: &str, notes: &mut Vec<String>) {
        for k in keys {
            if self.get(k).is_some() {
                notes.push(format!("{} ignored: {why}", self.name(k)));
            }
        }
    }

    /// Errors on the first key that was not read.
    pub fn finish(self) -> Result<(), LegacyError> {
        for (k, v) in self.items {
            if *v != Data::Nil && !self.used.contains(&k.as_str()) {
                return Err(LegacyError::new(format!(
                    "unknown setting {} in the legacy config (see lua-compat/README.md for the keys the edge understands)",
                    self.name(k)
                )));
            }
        }
        Ok(())
    }
}

/// A list of strings: a Lua list, or one comma-separated string.
pub fn string_list(d: &Data, name: &str) -> Result<Vec<String>, LegacyError> {
    match d {
        Data::Str(s) => Ok(s
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect()),
        Data::List(items) => items
            .iter()
            .map(|i| match i {
                Data::Str(s) => Ok(s.clone()),
                _ => Err(LegacyError::new(format!("{name} must list strings"))),
            })
            .collect(),
        _ => Err(LegacyError::new(format!(
            "{name} must be a list of strings"
        ))),
    }
}

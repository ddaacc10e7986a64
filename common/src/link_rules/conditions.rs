//! The compact forms of a rule's conditions: sets of devices or apps as
//! bits, countries and languages inline. The edge walks every rule of a
//! link on each request, so a rule's conditions are one small block with
//! nothing to follow (`docs/perf.md`, "Link rules laid out for the walk");
//! the record's JSON is what it always was.

use super::{App, DeviceCond, Lang, MAX_VALUES};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;

/// A set of [`DeviceCond`]s or [`App`]s as bits: a condition is one test,
/// with nothing to follow. Read from and written as a list of names, in
/// the type's own order (duplicates fold); at most [`MAX_VALUES`] names
/// are read, as for the other lists.
pub struct Set<T> {
    bits: u16,
    of: std::marker::PhantomData<T>,
}

// By hand: derives would ask the same of `T`.
impl<T> Clone for Set<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Set<T> {}

impl<T> PartialEq for Set<T> {
    fn eq(&self, other: &Self) -> bool {
        self.bits == other.bits
    }
}

impl<T> Eq for Set<T> {}

impl<T> Default for Set<T> {
    fn default() -> Self {
        Set {
            bits: 0,
            of: std::marker::PhantomData,
        }
    }
}

/// A value a [`Set`] holds.
pub trait Member: Copy + 'static {
    /// Every value, in order (at most 16).
    const ALL: &'static [Self];
    /// Its position in [`Member::ALL`].
    fn index(self) -> u32;
}

impl Member for DeviceCond {
    const ALL: &'static [Self] = &DeviceCond::ALL;
    fn index(self) -> u32 {
        self as u32
    }
}

impl Member for App {
    const ALL: &'static [Self] = &App::ALL;
    fn index(self) -> u32 {
        self as u32
    }
}

impl<T: Member> Set<T> {
    pub fn is_empty(&self) -> bool {
        self.bits == 0
    }

    pub fn contains(&self, v: T) -> bool {
        self.bits & (1 << v.index()) != 0
    }

    /// The members, in [`Member::ALL`] order.
    pub fn iter(&self) -> impl Iterator<Item = T> + '_ {
        T::ALL.iter().copied().filter(|v| self.contains(*v))
    }
}

impl<T: Member> FromIterator<T> for Set<T> {
    fn from_iter<I: IntoIterator<Item = T>>(it: I) -> Self {
        Set {
            bits: it.into_iter().fold(0, |b, v| b | 1 << v.index()),
            of: std::marker::PhantomData,
        }
    }
}

impl<T: Member + std::fmt::Debug> std::fmt::Debug for Set<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<T: Member + Serialize> Serialize for Set<T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
    }
}

impl<'de, T: Member + Deserialize<'de>> Deserialize<'de> for Set<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let names = Vec::<T>::deserialize(d)?;
        if names.len() > MAX_VALUES {
            return Err(serde::de::Error::custom(format!(
                "at most {MAX_VALUES} values"
            )));
        }
        Ok(names.into_iter().collect())
    }
}

/// An ISO 3166-1 alpha-2 code, upper case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Country(pub [u8; 2]);

impl Country {
    /// `s` if it is two upper-case ASCII letters.
    pub fn parse(s: &str) -> Result<Country, String> {
        match s.as_bytes() {
            [a, b] if a.is_ascii_uppercase() && b.is_ascii_uppercase() => Ok(Country([*a, *b])),
            _ => Err(format!("country {s:?} is not an ISO 3166 alpha-2 code")),
        }
    }

    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

impl Serialize for Country {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Country {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = Cow::<'de, str>::deserialize(d)?;
        Country::parse(&s).map_err(serde::de::Error::custom)
    }
}

impl Serialize for Lang {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Lang {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = Cow::<'de, str>::deserialize(d)?;
        Lang::parse(&s).map_err(serde::de::Error::custom)
    }
}

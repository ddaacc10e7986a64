//! `application/x-www-form-urlencoded` bodies: the console's forms and a
//! password link's entry (`http::unlock`).

use crate::error::ApiError;
use axum::body::Body;
use http::{header, HeaderMap, StatusCode};

/// A parsed form (first value of each name).
pub struct Form(Vec<(String, String)>);

impl Form {
    /// Reads a form body of at most `max` bytes (413 past it, 415 for
    /// another content type).
    pub async fn read(headers: &HeaderMap, body: Body, max: usize) -> Result<Form, ApiError> {
        let ct = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if !ct.split(';').next().is_some_and(|t| {
            t.trim()
                .eq_ignore_ascii_case("application/x-www-form-urlencoded")
        }) {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "send the console's form (application/x-www-form-urlencoded)",
            ));
        }
        let bytes = crate::body::read_body_max(headers, body, max).await?;
        Ok(Form::parse(&bytes))
    }

    /// Parses an encoded form.
    pub fn parse(bytes: &[u8]) -> Form {
        Form(
            url::form_urlencoded::parse(bytes)
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
        )
    }

    /// Every value of `name`, in order (checkboxes).
    pub fn all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.0
            .iter()
            .filter(move |(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The first value of `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

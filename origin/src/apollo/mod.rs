//! Apollo configuration-centre client feeding the dynamic merchant-domain
//! whitelist. (Placeholder: the Apollo issue fills this in.)

use serde::Deserialize;

/// `apollo:` section of the YAML file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApolloFile {}

/// Validated Apollo settings.
#[derive(Debug, Clone)]
pub struct ApolloConfig {}

impl ApolloConfig {
    /// Validates the file section; `env` supplies overrides such as the secret.
    pub fn from_file(
        _f: ApolloFile,
        _env: &impl Fn(&str) -> Option<String>,
    ) -> Result<ApolloConfig, String> {
        Ok(ApolloConfig {})
    }
}

/// Loads the dynamic whitelist (Apollo, else the last-good file) and keeps it
/// fresh in the background. Returns once the first value (or the decision
/// that there is none) is in place, so the origin starts with its best list.
pub async fn start(
    _cfg: ApolloConfig,
    _whitelist: std::sync::Arc<crate::whitelist::Whitelist>,
) -> Option<tokio::task::JoinHandle<()>> {
    None
}

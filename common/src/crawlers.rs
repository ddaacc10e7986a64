//! Link-preview crawlers (`common/data/crawlers.txt`, protocol 4.4): the
//! User-Agents a link with a social card answers with its card page
//! instead of the redirect. The OpenResty module reads the same file.

use aho_corasick::AhoCorasick;
use std::sync::OnceLock;

/// The crawler tokens (see the file's header).
pub const CRAWLERS_TXT: &str = include_str!("../data/crawlers.txt");

/// The tokens of [`CRAWLERS_TXT`], in file order.
pub fn tokens() -> impl Iterator<Item = &'static str> {
    crate::clicks::ua::data_lines(CRAWLERS_TXT)
}

/// Whether `ua` is a link-preview crawler's: it contains a token, ASCII
/// case aside. Asked only for a link that has a card.
pub fn is_crawler(ua: &[u8]) -> bool {
    static AC: OnceLock<Option<AhoCorasick>> = OnceLock::new();
    match AC.get_or_init(|| crate::clicks::ua::prefilter(tokens(), true)) {
        Some(ac) => ac.is_match(ua),
        None => {
            let lower = ua.to_ascii_lowercase();
            tokens().any(|t| memchr::memmem::find(&lower, t.as_bytes()).is_some())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clicks::ua::is_bot;

    const FETCHERS: [&str; 8] = [
        "facebookexternalhit/1.1 (+http://www.facebook.com/externalhit_uatext.php)",
        "Twitterbot/1.0",
        "LinkedInBot/1.0 (compatible; Mozilla/5.0; Apache-HttpClient +http://www.linkedin.com)",
        "Slackbot-LinkExpanding 1.0 (+https://api.slack.com/robots)",
        "Mozilla/5.0 (compatible; Discordbot/2.0; +https://discordapp.com)",
        "WhatsApp/2.23.20.0",
        "TelegramBot (like TwitterBot)",
        "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.0 Safari/605.1.15 (Applebot/0.1; +http://www.apple.com/go/applebot)",
    ];

    #[test]
    fn the_documented_fetchers_are_crawlers_and_bots() {
        for ua in FETCHERS {
            assert!(is_crawler(ua.as_bytes()), "{ua}");
            assert!(is_bot(ua), "a card must count as a bot click: {ua}");
        }
    }

    #[test]
    fn every_token_is_a_bot_so_a_card_counts_as_one() {
        for t in tokens() {
            assert!(is_bot(t), "{t} is not in bots.txt");
        }
    }

    #[test]
    fn browsers_and_in_app_browsers_are_not_crawlers() {
        for ua in [
            "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0 Safari/537.36",
            "Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile/15E148 MicroMessenger/8.0.47",
            "Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile/15E148 [FBAN/FBIOS;FBAV/450.0]",
            "",
        ] {
            assert!(!is_crawler(ua.as_bytes()), "{ua}");
        }
    }
}

//! Evaluating an untrusted `config.lua`: vendored Lua 5.4 with only
//! `string`, `table`, `math` and `utf8` (no `os`, `io`, `require`, `load`,
//! `dofile`), bounded in memory and in instructions.

use super::value::{self, Data};
use super::LegacyError;
use mlua::{Lua, LuaOptions, StdLib, Value};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Memory and instruction budgets of the sandbox: a config is a table.
const MEMORY_LIMIT: usize = 16 << 20;
const INSTRUCTION_LIMIT: u64 = 10_000_000;
const HOOK_EVERY: u32 = 10_000;

/// Globals removed even though their library is not loaded (base library
/// functions that read files or compile code).
const REMOVED_GLOBALS: [&str; 9] = [
    "dofile",
    "loadfile",
    "load",
    "require",
    "collectgarbage",
    "os",
    "io",
    "package",
    "debug",
];

/// Runs `source` (named `name` in messages) and returns the table it
/// returns, as data.
pub fn eval(source: &str, name: &str) -> Result<Data, LegacyError> {
    let lua = Lua::new_with(
        StdLib::STRING | StdLib::TABLE | StdLib::MATH | StdLib::UTF8,
        LuaOptions::default(),
    )
    .map_err(|e| LegacyError::lua(format!("{name}: cannot start Lua"), e))?;
    let _ = lua.set_memory_limit(MEMORY_LIMIT);
    let globals = lua.globals();
    for g in REMOVED_GLOBALS {
        globals
            .raw_set(g, Value::Nil)
            .map_err(|e| LegacyError::lua(format!("{name}: sandbox"), e))?;
    }
    let steps = AtomicU64::new(0);
    lua.set_hook(
        mlua::HookTriggers::new().every_nth_instruction(HOOK_EVERY),
        move |_, _| {
            if steps.fetch_add(u64::from(HOOK_EVERY), Relaxed) > INSTRUCTION_LIMIT {
                return Err(mlua::Error::runtime("instruction limit exceeded"));
            }
            Ok(mlua::VmState::Continue)
        },
    )
    .map_err(|e| LegacyError::lua(format!("{name}: sandbox"), e))?;
    let value: Value = lua
        .load(source)
        .set_name(format!("@{name}"))
        .set_mode(mlua::chunk::ChunkMode::Text)
        .eval()
        .map_err(|e| {
            // The first line is the message; the rest is a Lua traceback.
            let msg = e.to_string().lines().next().unwrap_or_default().to_owned();
            LegacyError::lua(msg, e)
        })?;
    let data = value::from_lua(&value, "")?;
    if !matches!(data, Data::Map(_) | Data::List(_)) {
        return Err(LegacyError::new("the file must return a table"));
    }
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sandbox_has_no_os_io_or_require() {
        for (src, needle) in [
            ("return { x = os.getenv('HOME') }", "os"),
            ("return io.open('/etc/passwd')", "io"),
            ("return require('socket')", "require"),
            ("return dofile('/etc/passwd')", "dofile"),
            ("return loadfile('/etc/passwd')", "loadfile"),
            ("return load('return 1')()", "load"),
            ("return package.path", "package"),
            ("return debug.getinfo(1)", "debug"),
            ("while true do end", "instruction limit"),
            (
                "local t = {} for i = 1, 1e9 do t[i] = ('x'):rep(1000) end",
                "memory",
            ),
        ] {
            match eval(src, "evil.lua") {
                Ok(v) => panic!("{src:?} ran: {v:?}"),
                Err(e) => assert!(e.to_string().contains(needle), "{src:?}: {e}"),
            }
        }
    }

    #[test]
    fn string_table_and_math_are_there() {
        let d = eval(
            "return { a = string.rep('x', 3), b = table.concat({ 'p', 'q' }, ','), c = math.max(2, 7) }",
            "ok.lua",
        );
        assert_eq!(
            d.ok(),
            Some(Data::Map(vec![
                ("a".into(), Data::Str("xxx".into())),
                ("b".into(), Data::Str("p,q".into())),
                ("c".into(), Data::Int(7)),
            ]))
        );
    }

    #[test]
    fn a_script_must_return_a_table() {
        for src in ["return 42", "return 'x'", "return nil", "local x = 1"] {
            match eval(src, "c.lua") {
                Ok(v) => panic!("{src:?} accepted: {v:?}"),
                Err(e) => assert!(e.to_string().contains("must return a table"), "{src}: {e}"),
            }
        }
        match eval("return {", "c.lua") {
            Ok(v) => panic!("syntax error accepted: {v:?}"),
            Err(e) => assert!(e.to_string().contains("c.lua"), "{e}"),
        }
    }
}

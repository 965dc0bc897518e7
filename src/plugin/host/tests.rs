//! Unit tests of `src/plugin/host.rs`.

use super::*;
use wasm_encoder::{
    CodeSection, ComponentBuilder, ComponentExportKind, ExportKind, ExportSection, Function,
    FunctionSection, Instruction, MemorySection, MemoryType, Module, PrimitiveValType, TypeSection,
    ValType,
};

/// A component of `instances` core instances of one module, each with its own memory
/// (0 pages at first), exporting `grow-<i>: func(pages: u32) -> s32`: `memory.grow` of
/// instance `i`'s memory. The Rust toolchain cannot build this; a hostile one can.
fn many_memories(instances: u32) -> Vec<u8> {
    let mut module = Module::new();
    let mut types = TypeSection::new();
    types.ty().function([ValType::I32], [ValType::I32]);
    module.section(&types);
    let mut funcs = FunctionSection::new();
    funcs.function(0);
    module.section(&funcs);
    let mut memories = MemorySection::new();
    memories.memory(MemoryType {
        minimum: 0,
        maximum: None,
        memory64: false,
        shared: false,
        page_size_log2: None,
    });
    module.section(&memories);
    let mut exports = ExportSection::new();
    exports.export("grow", ExportKind::Func, 0);
    module.section(&exports);
    let mut code = CodeSection::new();
    let mut grow = Function::new(Vec::<(u32, ValType)>::new());
    grow.instruction(&Instruction::LocalGet(0))
        .instruction(&Instruction::MemoryGrow(0))
        .instruction(&Instruction::End);
    code.function(&grow);
    module.section(&code);

    let mut c = ComponentBuilder::default();
    let m = c.core_module(None, &module);
    let (ty, mut f) = c.type_function(None);
    f.params([("pages", PrimitiveValType::U32)])
        .result(Some(PrimitiveValType::S32.into()));
    for i in 0..instances {
        let instance = c.core_instantiate(None, m, []);
        let core = c.core_alias_export(None, instance, "grow", ExportKind::Func);
        let lifted = c.lift_func(None, core, ty, []);
        c.export(
            format!("grow-{i}").as_str(),
            ComponentExportKind::Func,
            lifted,
            None,
        );
    }
    c.finish()
}

#[test]
fn one_memory_cap_covers_every_memory_of_the_instance() {
    let host = PluginHost::new(HostConfig::default()).unwrap();
    let engine = &host.inner.engine;
    let component = Component::new(engine, many_memories(3)).unwrap();
    let limits = Limits {
        deadline: Duration::from_secs(5),
        memory_bytes: 64 << 20,
    };
    let core = host.loaded_core("memories", [0; 32], Some(limits), Contract::V4);
    let mut store = core.new_store(false);
    let instance = Linker::new(engine)
        .instantiate(&mut store, &component)
        .unwrap();
    let mut grow = |i: u32, pages: u32| -> wasmtime::Result<i32> {
        let f = instance.get_typed_func::<(u32,), (i32,)>(&mut store, &format!("grow-{i}"))?;
        Ok(f.call(&mut store, (pages,))?.0)
    };
    // 24 MiB (384 pages) each: each memory alone is far below the 64 MiB cap, two fit in it
    // together, the third passes it.
    assert_eq!(grow(0, 384).unwrap(), 0);
    assert_eq!(grow(1, 384).unwrap(), 0);
    let err = grow(2, 384).unwrap_err();
    let err = core.classify(&store, err);
    assert!(
        matches!(err, PluginError::MemoryCap { cap_bytes, .. } if cap_bytes == 64 << 20),
        "{err}"
    );
}

#[test]
fn log_lines_are_cut_before_they_reach_tracing() {
    let fields: Vec<(String, String)> = (0..100)
        .map(|i| (format!("{i}").repeat(1000), "v".repeat(100_000)))
        .collect();
    let (message, kept) = cap_log_line("é".repeat(1 << 20), fields);
    assert!(message.len() <= LOG_MESSAGE_CAP + 40, "{}", message.len());
    assert!(message.ends_with("[2097152 bytes, cut]"), "{message}");
    assert_eq!(kept.len(), LOG_FIELDS_CAP + 1);
    for (k, v) in &kept[..LOG_FIELDS_CAP] {
        assert!(k.len() <= LOG_KEY_CAP + 40 && v.len() <= LOG_VALUE_CAP + 40);
    }
    assert_eq!(kept[LOG_FIELDS_CAP].1, "84 more fields dropped");
    // Short lines pass unchanged.
    let line = cap_log_line("hi".into(), vec![("k".into(), "v".into())]);
    assert_eq!(line, ("hi".to_string(), vec![("k".into(), "v".into())]));
}

#[test]
fn the_epoch_ticks_only_while_a_store_is_alive() {
    let engine = Engine::default();
    let ticker = EpochTicker::start(&engine, Duration::from_millis(1)).expect("ticker");
    let ticks = || ticker.ticks.load(Ordering::Relaxed);
    let wait_for = |what: &str, done: &dyn Fn() -> bool| {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !done() {
            assert!(std::time::Instant::now() < deadline, "{what}");
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    // Idle from the start: not one tick in 50 ticks' time.
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(ticks(), 0, "no Store, no tick");

    let store = ticker.ticking();
    wait_for("a Store makes the epoch tick", &|| ticks() >= 3);
    let second = ticker.ticking();
    drop(store);
    let before = ticks();
    wait_for("one Store left still ticks", &|| ticks() >= before + 3);
    drop(second);
    // The tick under way may still land; after it the ticker sleeps.
    let stopped = ticks();
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        ticks() <= stopped + 1,
        "{} ticks after the last Store",
        ticks() - stopped
    );

    let again = ticker.ticking();
    let before = ticks();
    wait_for("a new Store wakes the ticker", &|| ticks() >= before + 3);
    drop(again);
}

#[test]
fn the_ticker_ends_with_its_engine() {
    let engine = Engine::default();
    let ticker = EpochTicker::start(&engine, Duration::from_millis(1)).expect("ticker");
    let guard = ticker.ticking();
    drop(engine);
    // The thread holds the ticker; once it ends, only this test's handles are left.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while Arc::strong_count(&ticker) > 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "the ticker outlived its engine"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(guard);
}

import CofferCore
import CofferState
import CofferStorage
import Foundation
import Observation
import Testing

/// A group nested in a ``StoredKeyGroup`` is one object per parent, so its keys are observed and
/// computed from like top-level keys: a group made anew on each access would make its `Stored`
/// properties anew, and an observer of one would miss a write made through the next.
@Suite("Key groups: a nested group's keys are observed like top-level ones")
struct NestedKeyGroupTests {
    struct AppKeys: StoredKeyGroup {
        let launchCount = StoredKey("launchCount", default: 0)
        let debug = DebugKeys()
    }

    struct DebugKeys: StoredKeyGroup {
        let showConsole = StoredKey("showConsole", default: false)
    }

    @Test("A nested group's key is observed like a top-level one: a later write through the group is seen")
    func nestedGroupObservation() throws {
        try withTemporaryContext { _ in
            let storage = StoredGroup<AppKeys>(store: .memory)
            let changed = Counter()
            withObservationTracking {
                _ = storage.debug.showConsole
            } onChange: {
                changed.bump()
            }
            storage.debug.showConsole = true
            #expect(changed.value == 1)
            // The nested group is one object, so its Stored properties are too.
            #expect(storage.debug.stored(\.showConsole) === storage.debug.stored(\.showConsole))
        }
    }

    @Test("A Computed that reads a nested group's key follows a write made through the group")
    func nestedGroupComputed() throws {
        try withTemporaryContext { _ in
            let storage = StoredGroup<AppKeys>(store: .memory)
            let console = Computed { storage.debug.showConsole ? "shown" : "hidden" }
            #expect(console.wrappedValue == "hidden")
            storage.debug.showConsole = true
            #expect(console.wrappedValue == "shown")
        }
    }
}

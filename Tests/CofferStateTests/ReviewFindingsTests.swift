import CofferCore
import CofferState
import CofferStorage
import Foundation
import Observation
import Testing

// Defects found in review of issue 16's spellings, each shown by a test that failed before its fix.

@Suite("Review findings: key groups")
struct StateReviewFindingsTests {
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

import CofferCore
import CofferState
import CofferStorage
import Foundation

/// A model made outside any `CofferContext.$current.withValue`, as a test that forgot one does.
final class UnscopedPreferences {
    @Stored(backed: .keyValue(key: "theme")) var theme = "light"
    @Stored(backed: .disk(key: "launches")) var launches = 0
}

/// `default-context [APP-NAME]`: optionally names the app, writes and re-reads two properties in
/// the standard context, and reports where it wrote ("dir …"), whether Coffer thinks this is a
/// test runner, and what renaming the app afterwards does. Warnings go to standard error as
/// the default handler writes them.
func defaultContext(appName: String?) throws {
    if let appName { try CofferContext.setDefaultAppName(appName) }
    let first = UnscopedPreferences()
    first.theme = "dark"
    first.launches += 1
    if let error = first.$theme.error ?? first.$launches.error { fail("write failed: \(error)") }
    let second = UnscopedPreferences()
    say("theme \(second.theme) launches \(second.launches)")
    say("dir \(CofferContext.standard.directory.path)")
    say("app \(CofferContext.defaultAppName)")
    say("running-tests \(CofferContext.isRunningTests)")
    do {
        try CofferContext.setDefaultAppName("renamed-too-late")
        say("late-rename accepted")
    } catch let error as CofferError {
        say("late-rename \(error.code): \(error.message)")
    }
}

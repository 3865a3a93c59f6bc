#if ExampleService
import Coffer
// SecureMemory.constantTimeEqual: `import Coffer` does not re-export CofferCrypto.
import CofferCrypto
import Foundation
import Hummingbird
import Logging

/// The routes. Every handler is async and uses the maps' async forms where a store may wait
/// (PostgreSQL, the vault's fsync), so no request holds a thread while a store works.
///
/// ```
/// GET    /flags/:name                 "true" or "false"
/// PUT    /flags/:name                 body "true" or "false"
/// GET    /tenants/:tenant/token       "set" or "not set" (never the token)
/// PUT    /tenants/:tenant/token       body: the token
/// POST   /tenants/:tenant/token/check body: a presented token; 204 if it matches, else 403
/// DELETE /tenants/:tenant/token
/// GET    /settings/:key               the value; 404 when none is stored
/// PUT    /settings/:key               body: the value
/// ```
func makeRouter(state: TenantState, logger: Logger) -> Router<BasicRequestContext> {
    let router = Router()
    router.add(middleware: CofferErrorMiddleware(logger: logger))

    // Feature flags: a local suite. A loaded key reads from memory.
    router.get("flags/:name") { _, context -> String in
        let name = try context.parameters.require("name")
        return state.flags[name] ? "true" : "false"
    }
    router.put("flags/:name") { request, context -> HTTPResponse.Status in
        let name = try context.parameters.require("name")
        let on: Bool
        switch try await text(of: request) {
        case "true": on = true
        case "false": on = false
        default: throw HTTPError(.badRequest, message: "a flag is true or false")
        }
        try await state.flags.save(on, for: name)
        return .noContent
    }

    // Per-tenant API tokens, in the vault. A token goes in, and is checked; it never comes out.
    router.get("tenants/:tenant/token") { _, context -> String in
        let tenant = try context.parameters.require("tenant")
        return try await state.tokens.load(tenant) == nil ? "not set" : "set"
    }
    router.put("tenants/:tenant/token") { request, context -> HTTPResponse.Status in
        let tenant = try context.parameters.require("tenant")
        let token = try await text(of: request)
        guard !token.isEmpty else { throw HTTPError(.badRequest, message: "the body is the token, and it is empty") }
        try await state.tokens.save(token, for: tenant)
        return .noContent
    }
    router.post("tenants/:tenant/token/check") { request, context -> HTTPResponse.Status in
        let tenant = try context.parameters.require("tenant")
        let presented = try await text(of: request)
        guard let stored = try await state.tokens.load(tenant) else { return .forbidden }
        // Constant time: how long the comparison takes says nothing about where they differ.
        return SecureMemory.constantTimeEqual(Array(stored.utf8), Array(presented.utf8)) ? .noContent : .forbidden
    }
    router.delete("tenants/:tenant/token") { _, context -> HTTPResponse.Status in
        try await state.tokens.remove(try context.parameters.require("tenant"))
        return .noContent
    }

    // Fleet settings, in PostgreSQL: `load` and `save` wait for the server without blocking a thread.
    router.get("settings/:key") { _, context -> String in
        let key = try context.parameters.require("key")
        guard let value = try await state.settings.load(key) else { throw HTTPError(.notFound) }
        return value
    }
    router.put("settings/:key") { request, context -> HTTPResponse.Status in
        let key = try context.parameters.require("key")
        try await state.settings.save(try await text(of: request), for: key)  // committed on return
        return .noContent
    }
    return router
}

/// A request's body as text, without a trailing newline (what `curl -d` or a here-string sends).
private func text(of request: Request) async throws -> String {
    let buffer = try await request.body.collect(upTo: 64 * 1024)
    var text = String(buffer: buffer)
    while text.last?.isNewline == true { text.removeLast() }
    return text
}

/// Answers a `CofferError` with a status that says whose problem it is: the client's input
/// (400), a store that is busy, locked or unreachable (503), or anything else (500). The error
/// is logged; its message names keys and files, never a value, so it may be logged.
struct CofferErrorMiddleware<Context: RequestContext>: RouterMiddleware {
    let logger: Logger

    func handle(
        _ request: Request, context: Context, next: (Request, Context) async throws -> Response
    ) async throws -> Response {
        do {
            return try await next(request, context)
        } catch let error as CofferError {
            logger.error("\(request.method) \(request.uri.path): \(error)")
            switch error.code {
            case .invalidArgument, .limitExceeded:
                throw HTTPError(.badRequest, message: error.message)
            case .busy, .locked, .io:
                throw HTTPError(.serviceUnavailable, message: "the store is unavailable (\(error.code)); try again")
            default:
                throw HTTPError(.internalServerError)
            }
        }
    }
}
#endif

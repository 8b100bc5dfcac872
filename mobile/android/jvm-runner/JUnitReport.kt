// Runs JUnit 4 test classes with JUnitCore and writes what ran as JSON (names, passed, failed,
// skipped, the first line of each failure), for targets/android/app.py's app_build record. Compiled
// only by that driver (Gradle's own test task reports for itself): args = report path, class names.
package org.arrcoc.jvmrunner

import org.json.JSONArray
import org.json.JSONObject
import org.junit.runner.Description
import org.junit.runner.JUnitCore
import org.junit.runner.notification.Failure
import org.junit.runner.notification.RunListener
import java.io.File
import kotlin.system.exitProcess

fun main(args: Array<String>) {
    val report = File(args[0])
    val classes = args.drop(1).map { Class.forName(it) }
    val names = JSONArray()
    val failures = JSONArray()
    val skipped = JSONArray()
    val core = JUnitCore()
    core.addListener(object : RunListener() {
        override fun testFinished(description: Description) {
            names.put("${description.testClass.simpleName}.${description.methodName}")
        }
        override fun testFailure(failure: Failure) {
            val line = (failure.message ?: failure.exception.toString()).lineSequence().first()
            failures.put(JSONObject().put("name", failure.description.displayName).put("message", line))
        }
        override fun testAssumptionFailure(failure: Failure) {
            skipped.put(failure.description.displayName)
        }
        override fun testIgnored(description: Description) {
            skipped.put(description.displayName)
        }
    })
    val result = core.run(*classes.toTypedArray())
    report.writeText(JSONObject()
        .put("run", result.runCount).put("failed", result.failureCount).put("skipped", skipped.length())
        .put("names", names).put("failures", failures).put("skipped_names", skipped).toString(1))
    exitProcess(if (result.wasSuccessful() && skipped.length() == 0) 0 else 1)
}

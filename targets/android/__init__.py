"""android: the ExecuTorch files, contract and golden bundle for the Kotlin sample app, and the app
compiled with kotlinc and its logic run on the JVM.
"""

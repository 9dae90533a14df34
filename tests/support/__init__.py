"""What the tests share that is not itself a test: waiting, real servers, store builders."""

package io.shardcron.examples;

import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import io.grpc.Metadata;
import io.grpc.StatusRuntimeException;
import io.grpc.stub.MetadataUtils;
import io.shardcron.v1.CommandTask;
import io.shardcron.v1.CreateJobRequest;
import io.shardcron.v1.CreateJobResponse;
import io.shardcron.v1.GetRunRequest;
import io.shardcron.v1.JobServiceGrpc;
import io.shardcron.v1.JobSpec;
import io.shardcron.v1.ListRunsRequest;
import io.shardcron.v1.ListRunsResponse;
import io.shardcron.v1.OutputChunk;
import io.shardcron.v1.ReadRunOutputRequest;
import io.shardcron.v1.Run;
import io.shardcron.v1.RunState;
import io.shardcron.v1.Schedule;
import io.shardcron.v1.ScheduleKind;
import io.shardcron.v1.Task;
import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.util.EnumSet;
import java.util.Iterator;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.TimeUnit;

/**
 * shardcron Java client example (grpc-java, stubs generated from proto/).
 *
 * <p>Creates an immediate command job {@code sh -c 'echo java-ok'}, waits for its run to be
 * final (ListRuns, then GetRun polling), asserts it SUCCEEDED with the output "java-ok", and
 * exits non-zero otherwise.
 *
 * <pre>java -cp target/classes:$(cat target/classpath.txt) io.shardcron.examples.JavaClient \
 *     --target 127.0.0.1:7400 [--owner default] [--token T] [--timeout 60]</pre>
 *
 * <p>A node with an auth file wants a bearer token on every call: {@code --token}, or
 * {@code SHARDCRON_TOKEN}, is sent as {@code authorization: Bearer <token>}.
 */
public final class JavaClient {
  static final Metadata.Key<String> OWNER_KEY =
      Metadata.Key.of("x-shardcron-owner", Metadata.ASCII_STRING_MARSHALLER);
  static final Metadata.Key<String> AUTHORIZATION_KEY =
      Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER);
  static final Set<RunState> FINAL =
      EnumSet.of(
          RunState.RUN_STATE_SUCCEEDED,
          RunState.RUN_STATE_FAILED,
          RunState.RUN_STATE_TIMED_OUT,
          RunState.RUN_STATE_CANCELLED,
          RunState.RUN_STATE_SKIPPED,
          RunState.RUN_STATE_MISSED);

  private JavaClient() {}

  public static void main(String[] args) throws Exception {
    String target = envOr("SHARDCRON_TARGET", "127.0.0.1:7400");
    String owner = envOr("SHARDCRON_OWNER", "default");
    String token = envOr("SHARDCRON_TOKEN", "");
    long timeoutMs = 60_000;
    for (int i = 0; i < args.length; i++) {
      switch (args[i]) {
        case "--target" -> target = args[++i];
        case "--owner" -> owner = args[++i];
        case "--token" -> token = args[++i];
        case "--timeout" -> timeoutMs = (long) (Double.parseDouble(args[++i]) * 1000);
        default -> {
          System.err.println("unknown argument " + args[i] + " (want --target, --owner, --token, --timeout)");
          System.exit(2);
        }
      }
    }
    ManagedChannel channel = ManagedChannelBuilder.forTarget(target).usePlaintext().build();
    int code;
    try {
      code = run(channel, owner, token, timeoutMs);
    } catch (StatusRuntimeException e) {
      System.err.println("java-client: FAILED: " + e.getStatus());
      code = 1;
    } finally {
      channel.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
    }
    System.exit(code);
  }

  static int run(ManagedChannel channel, String owner, String token, long timeoutMs)
      throws InterruptedException {
    Metadata md = new Metadata();
    md.put(OWNER_KEY, owner);
    if (!token.isEmpty()) {
      md.put(AUTHORIZATION_KEY, "Bearer " + token);
    }
    JobServiceGrpc.JobServiceBlockingStub jobs =
        JobServiceGrpc.newBlockingStub(channel)
            .withInterceptors(MetadataUtils.newAttachHeadersInterceptor(md));
    long deadline = System.currentTimeMillis() + timeoutMs;

    JobSpec spec =
        JobSpec.newBuilder()
            .setName("java-client-example")
            .setTask(
                Task.newBuilder()
                    .setCommand(
                        CommandTask.newBuilder().addArgv("sh").addArgv("-c").addArgv("echo java-ok")))
            .setSchedule(Schedule.newBuilder().setKind(ScheduleKind.SCHEDULE_KIND_IMMEDIATE))
            .putLabels("example", "java-client")
            .build();
    CreateJobResponse created =
        jobs.withDeadlineAfter(10, TimeUnit.SECONDS)
            .createJob(
                CreateJobRequest.newBuilder()
                    .setSpec(spec)
                    .setIdempotencyKey("java-client-" + UUID.randomUUID())
                    .build());
    String jobId = created.getJob().getId();
    System.out.println("created job " + jobId + " (created=" + created.getCreated() + ")");

    // The first run is written with the job: ListRuns names it; GetRun polls it.
    String runId = null;
    while (runId == null) {
      ListRunsResponse runs =
          jobs.withDeadlineAfter(10, TimeUnit.SECONDS)
              .listRuns(ListRunsRequest.newBuilder().setJobId(jobId).build());
      if (runs.getRunsCount() > 0) {
        runId = runs.getRuns(runs.getRunsCount() - 1).getId();
      } else if (System.currentTimeMillis() > deadline) {
        return fail("job " + jobId + " lists no run");
      } else {
        Thread.sleep(100);
      }
    }
    Run run;
    while (true) {
      run =
          jobs.withDeadlineAfter(10, TimeUnit.SECONDS)
              .getRun(GetRunRequest.newBuilder().setRunId(runId).build());
      if (FINAL.contains(run.getState())) {
        break;
      }
      if (System.currentTimeMillis() > deadline) {
        return fail("run " + runId + " still " + run.getState() + " at the deadline");
      }
      Thread.sleep(100);
    }
    System.out.printf(
        "run %s: %s exit %s on worker %s%n",
        run.getId(), run.getState(), run.getHasExitCode() ? run.getExitCode() : "-", run.getWorkerId());

    ByteArrayOutputStream out = new ByteArrayOutputStream();
    Iterator<OutputChunk> chunks =
        jobs.withDeadlineAfter(10, TimeUnit.SECONDS)
            .readRunOutput(ReadRunOutputRequest.newBuilder().setRunId(runId).build());
    while (chunks.hasNext()) {
      out.writeBytes(chunks.next().getData().toByteArray());
    }
    String output = out.toString(StandardCharsets.UTF_8);
    System.out.print("output: " + output);

    if (run.getState() != RunState.RUN_STATE_SUCCEEDED) {
      return fail("run " + runId + " ended " + run.getState() + ": " + run.getError());
    }
    if (!output.equals("java-ok\n")) {
      return fail("output of run " + runId + " is \"" + output + "\", want \"java-ok\\n\"");
    }
    System.out.println("java-client: OK");
    return 0;
  }

  static int fail(String msg) {
    System.err.println("java-client: FAILED: " + msg);
    return 1;
  }

  static String envOr(String key, String def) {
    String v = System.getenv(key);
    return v == null || v.isEmpty() ? def : v;
  }
}

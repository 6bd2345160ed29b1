# syntax=docker/dockerfile:1
# The ferry CLI and relay daemon. Multi-stage: build with the dev toolchain,
# run with production dependencies only, as a non-root user.
FROM node:22.23-bookworm-slim AS build
WORKDIR /src
COPY package.json package-lock.json tsconfig.json tsconfig.base.json ./
COPY packages ./packages
COPY apps ./apps
COPY test/package.json ./test/package.json
COPY bench/package.json ./bench/package.json
RUN npm ci --no-audit --no-fund && npx tsc --build apps/relay

FROM node:22.23-bookworm-slim AS runtime
ENV NODE_ENV=production
WORKDIR /app
COPY --from=build /src/package.json /src/package-lock.json ./
COPY --from=build /src/packages ./packages
COPY --from=build /src/apps ./apps
COPY --from=build /src/test/package.json ./test/package.json
COPY --from=build /src/bench/package.json ./bench/package.json
RUN npm ci --omit=dev --no-audit --no-fund -w @ferry/relay --include-workspace-root=false && npm cache clean --force
USER node
# /metrics, /healthz and /readyz listen on 127.0.0.1 by default (they need no credentials). In a
# container that loopback is the container's own: probes, port mappings and Prometheus reach the
# container's interface, so the image listens on all of them; its network is the boundary.
ENV FERRY_HTTP_HOST=0.0.0.0
EXPOSE 9464
ENTRYPOINT ["node", "/app/apps/relay/bin/ferry.js"]
CMD ["relay"]

// A NestJS app with @nestjs/throttler's ThrottlerGuard on every route, as its docs set it up
// (ThrottlerModule.forRoot, the guard as APP_GUARD), the key read from the x-key header.
// STORAGE=redis keeps the counts in Redis with @nest-lab/throttler-storage-redis; otherwise
// each instance counts in its own memory (the module's default storage). Plain JavaScript:
// the decorators are applied as the functions they are.
require('reflect-metadata');
const { NestFactory, APP_GUARD } = require('@nestjs/core');
const { Module, Controller, Get } = require('@nestjs/common');
const { ThrottlerModule, ThrottlerGuard } = require('@nestjs/throttler');
const { ThrottlerStorageRedisService } = require('@nest-lab/throttler-storage-redis');

class AppController {
  index() {
    return 'ok';
  }
}
Controller()(AppController);
Get()(AppController.prototype, 'index', Object.getOwnPropertyDescriptor(AppController.prototype, 'index'));

const options = {
  throttlers: [{ ttl: Number(process.env.TTL_MS), limit: Number(process.env.LIMIT) }],
  getTracker: (req) => req.headers['x-key'] ?? req.ip,
};
if (process.env.STORAGE === 'redis') {
  // COMMAND_TIMEOUT_MS, if given, is the ioredis client's commandTimeout (unset by default);
  // the storage then takes the client made with it rather than the URL.
  const timeout = Number(process.env.COMMAND_TIMEOUT_MS);
  options.storage = new ThrottlerStorageRedisService(
    timeout ? new (require('ioredis'))(process.env.REDIS_URL, { commandTimeout: timeout }) : process.env.REDIS_URL,
  );
}

class AppModule {}
Module({
  imports: [ThrottlerModule.forRoot(options)],
  controllers: [AppController],
  providers: [{ provide: APP_GUARD, useClass: ThrottlerGuard }],
})(AppModule);

NestFactory.create(AppModule, { logger: ['error'] })
  .then((app) => app.listen(Number(process.env.PORT), '127.0.0.1'));
